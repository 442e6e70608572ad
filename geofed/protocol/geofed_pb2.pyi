from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class PushStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    PUSH_STATUS_UNSPECIFIED: _ClassVar[PushStatus]
    ACCEPTED: _ClassVar[PushStatus]
    APPLIED: _ClassVar[PushStatus]
    DUPLICATE: _ClassVar[PushStatus]
    STALE: _ClassVar[PushStatus]
PUSH_STATUS_UNSPECIFIED: PushStatus
ACCEPTED: PushStatus
APPLIED: PushStatus
DUPLICATE: PushStatus
STALE: PushStatus

class ShardRequest(_message.Message):
    __slots__ = ("federation", "version", "push_ids", "offset", "lo", "hi", "manifest", "folded", "keep", "keep_only")
    FEDERATION_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    PUSH_IDS_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    LO_FIELD_NUMBER: _ClassVar[int]
    HI_FIELD_NUMBER: _ClassVar[int]
    MANIFEST_FIELD_NUMBER: _ClassVar[int]
    FOLDED_FIELD_NUMBER: _ClassVar[int]
    KEEP_FIELD_NUMBER: _ClassVar[int]
    KEEP_ONLY_FIELD_NUMBER: _ClassVar[int]
    federation: str
    version: int
    push_ids: _containers.RepeatedScalarFieldContainer[str]
    offset: int
    lo: int
    hi: int
    manifest: _containers.RepeatedCompositeFieldContainer[TensorSpec]
    folded: int
    keep: _containers.RepeatedScalarFieldContainer[str]
    keep_only: bool
    def __init__(self, federation: _Optional[str] = ..., version: _Optional[int] = ..., push_ids: _Optional[_Iterable[str]] = ..., offset: _Optional[int] = ..., lo: _Optional[int] = ..., hi: _Optional[int] = ..., manifest: _Optional[_Iterable[_Union[TensorSpec, _Mapping]]] = ..., folded: _Optional[int] = ..., keep: _Optional[_Iterable[str]] = ..., keep_only: _Optional[bool] = ...) -> None: ...

class ShardState(_message.Message):
    __slots__ = ("index", "version", "prepared", "lo", "hi", "instance", "sq_norm", "ok", "message", "folded", "sha256")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    PREPARED_FIELD_NUMBER: _ClassVar[int]
    LO_FIELD_NUMBER: _ClassVar[int]
    HI_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_FIELD_NUMBER: _ClassVar[int]
    SQ_NORM_FIELD_NUMBER: _ClassVar[int]
    OK_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    FOLDED_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    index: int
    version: int
    prepared: int
    lo: int
    hi: int
    instance: str
    sq_norm: float
    ok: bool
    message: str
    folded: int
    sha256: bytes
    def __init__(self, index: _Optional[int] = ..., version: _Optional[int] = ..., prepared: _Optional[int] = ..., lo: _Optional[int] = ..., hi: _Optional[int] = ..., instance: _Optional[str] = ..., sq_norm: _Optional[float] = ..., ok: _Optional[bool] = ..., message: _Optional[str] = ..., folded: _Optional[int] = ..., sha256: _Optional[bytes] = ...) -> None: ...

class ShardStageChunk(_message.Message):
    __slots__ = ("federation", "push_id", "codec_header", "init", "lo", "hi", "frame")
    FEDERATION_FIELD_NUMBER: _ClassVar[int]
    PUSH_ID_FIELD_NUMBER: _ClassVar[int]
    CODEC_HEADER_FIELD_NUMBER: _ClassVar[int]
    INIT_FIELD_NUMBER: _ClassVar[int]
    LO_FIELD_NUMBER: _ClassVar[int]
    HI_FIELD_NUMBER: _ClassVar[int]
    FRAME_FIELD_NUMBER: _ClassVar[int]
    federation: str
    push_id: str
    codec_header: bytes
    init: bool
    lo: int
    hi: int
    frame: bytes
    def __init__(self, federation: _Optional[str] = ..., push_id: _Optional[str] = ..., codec_header: _Optional[bytes] = ..., init: _Optional[bool] = ..., lo: _Optional[int] = ..., hi: _Optional[int] = ..., frame: _Optional[bytes] = ...) -> None: ...

class ShardStageReply(_message.Message):
    __slots__ = ("sq_norm", "numel", "sketch")
    SQ_NORM_FIELD_NUMBER: _ClassVar[int]
    NUMEL_FIELD_NUMBER: _ClassVar[int]
    SKETCH_FIELD_NUMBER: _ClassVar[int]
    sq_norm: float
    numel: int
    sketch: _containers.RepeatedScalarFieldContainer[float]
    def __init__(self, sq_norm: _Optional[float] = ..., numel: _Optional[int] = ..., sketch: _Optional[_Iterable[float]] = ...) -> None: ...

class ShardFoldRequest(_message.Message):
    __slots__ = ("federation", "push_id", "client_id", "round", "scale", "norm", "staleness", "factor", "num_tokens", "local_steps", "position")
    FEDERATION_FIELD_NUMBER: _ClassVar[int]
    PUSH_ID_FIELD_NUMBER: _ClassVar[int]
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    ROUND_FIELD_NUMBER: _ClassVar[int]
    SCALE_FIELD_NUMBER: _ClassVar[int]
    NORM_FIELD_NUMBER: _ClassVar[int]
    STALENESS_FIELD_NUMBER: _ClassVar[int]
    FACTOR_FIELD_NUMBER: _ClassVar[int]
    NUM_TOKENS_FIELD_NUMBER: _ClassVar[int]
    LOCAL_STEPS_FIELD_NUMBER: _ClassVar[int]
    POSITION_FIELD_NUMBER: _ClassVar[int]
    federation: str
    push_id: str
    client_id: str
    round: int
    scale: float
    norm: float
    staleness: int
    factor: float
    num_tokens: int
    local_steps: int
    position: int
    def __init__(self, federation: _Optional[str] = ..., push_id: _Optional[str] = ..., client_id: _Optional[str] = ..., round: _Optional[int] = ..., scale: _Optional[float] = ..., norm: _Optional[float] = ..., staleness: _Optional[int] = ..., factor: _Optional[float] = ..., num_tokens: _Optional[int] = ..., local_steps: _Optional[int] = ..., position: _Optional[int] = ...) -> None: ...

class ShardFoldReply(_message.Message):
    __slots__ = ("weight",)
    WEIGHT_FIELD_NUMBER: _ClassVar[int]
    weight: float
    def __init__(self, weight: _Optional[float] = ...) -> None: ...

class ShardSliceChunk(_message.Message):
    __slots__ = ("offset", "total_bytes", "data")
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    TOTAL_BYTES_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    offset: int
    total_bytes: int
    data: bytes
    def __init__(self, offset: _Optional[int] = ..., total_bytes: _Optional[int] = ..., data: _Optional[bytes] = ...) -> None: ...

class JoinRequest(_message.Message):
    __slots__ = ("token", "client_id", "group", "paradigm", "manifest", "paradigm_json", "frozen_digest", "preview", "tokenizer_sha256", "tokenizer")
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    PARADIGM_FIELD_NUMBER: _ClassVar[int]
    MANIFEST_FIELD_NUMBER: _ClassVar[int]
    PARADIGM_JSON_FIELD_NUMBER: _ClassVar[int]
    FROZEN_DIGEST_FIELD_NUMBER: _ClassVar[int]
    PREVIEW_FIELD_NUMBER: _ClassVar[int]
    TOKENIZER_SHA256_FIELD_NUMBER: _ClassVar[int]
    TOKENIZER_FIELD_NUMBER: _ClassVar[int]
    token: str
    client_id: str
    group: str
    paradigm: str
    manifest: _containers.RepeatedCompositeFieldContainer[TensorSpec]
    paradigm_json: str
    frozen_digest: str
    preview: bool
    tokenizer_sha256: str
    tokenizer: str
    def __init__(self, token: _Optional[str] = ..., client_id: _Optional[str] = ..., group: _Optional[str] = ..., paradigm: _Optional[str] = ..., manifest: _Optional[_Iterable[_Union[TensorSpec, _Mapping]]] = ..., paradigm_json: _Optional[str] = ..., frozen_digest: _Optional[str] = ..., preview: _Optional[bool] = ..., tokenizer_sha256: _Optional[str] = ..., tokenizer: _Optional[str] = ...) -> None: ...

class JoinResponse(_message.Message):
    __slots__ = ("session", "session_ttl_s", "federation_json", "version", "master", "server_instance", "manifest", "rejoin_token", "rejoin_expires_at", "shard_bounds", "shard_map", "frozen_digest", "run_started_at", "master_client_id", "tokenizer_sha256", "tokenizer")
    SESSION_FIELD_NUMBER: _ClassVar[int]
    SESSION_TTL_S_FIELD_NUMBER: _ClassVar[int]
    FEDERATION_JSON_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    MASTER_FIELD_NUMBER: _ClassVar[int]
    SERVER_INSTANCE_FIELD_NUMBER: _ClassVar[int]
    MANIFEST_FIELD_NUMBER: _ClassVar[int]
    REJOIN_TOKEN_FIELD_NUMBER: _ClassVar[int]
    REJOIN_EXPIRES_AT_FIELD_NUMBER: _ClassVar[int]
    SHARD_BOUNDS_FIELD_NUMBER: _ClassVar[int]
    SHARD_MAP_FIELD_NUMBER: _ClassVar[int]
    FROZEN_DIGEST_FIELD_NUMBER: _ClassVar[int]
    RUN_STARTED_AT_FIELD_NUMBER: _ClassVar[int]
    MASTER_CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    TOKENIZER_SHA256_FIELD_NUMBER: _ClassVar[int]
    TOKENIZER_FIELD_NUMBER: _ClassVar[int]
    session: str
    session_ttl_s: float
    federation_json: str
    version: int
    master: bool
    server_instance: str
    manifest: _containers.RepeatedCompositeFieldContainer[TensorSpec]
    rejoin_token: str
    rejoin_expires_at: float
    shard_bounds: _containers.RepeatedScalarFieldContainer[int]
    shard_map: bytes
    frozen_digest: str
    run_started_at: float
    master_client_id: str
    tokenizer_sha256: str
    tokenizer: str
    def __init__(self, session: _Optional[str] = ..., session_ttl_s: _Optional[float] = ..., federation_json: _Optional[str] = ..., version: _Optional[int] = ..., master: _Optional[bool] = ..., server_instance: _Optional[str] = ..., manifest: _Optional[_Iterable[_Union[TensorSpec, _Mapping]]] = ..., rejoin_token: _Optional[str] = ..., rejoin_expires_at: _Optional[float] = ..., shard_bounds: _Optional[_Iterable[int]] = ..., shard_map: _Optional[bytes] = ..., frozen_digest: _Optional[str] = ..., run_started_at: _Optional[float] = ..., master_client_id: _Optional[str] = ..., tokenizer_sha256: _Optional[str] = ..., tokenizer: _Optional[str] = ...) -> None: ...

class TensorSpec(_message.Message):
    __slots__ = ("name", "shape", "dtype")
    NAME_FIELD_NUMBER: _ClassVar[int]
    SHAPE_FIELD_NUMBER: _ClassVar[int]
    DTYPE_FIELD_NUMBER: _ClassVar[int]
    name: str
    shape: _containers.RepeatedScalarFieldContainer[int]
    dtype: str
    def __init__(self, name: _Optional[str] = ..., shape: _Optional[_Iterable[int]] = ..., dtype: _Optional[str] = ...) -> None: ...

class StreamModelRequest(_message.Message):
    __slots__ = ("have_version", "resume_version", "resume_offset", "one_transfer")
    HAVE_VERSION_FIELD_NUMBER: _ClassVar[int]
    RESUME_VERSION_FIELD_NUMBER: _ClassVar[int]
    RESUME_OFFSET_FIELD_NUMBER: _ClassVar[int]
    ONE_TRANSFER_FIELD_NUMBER: _ClassVar[int]
    have_version: int
    resume_version: int
    resume_offset: int
    one_transfer: bool
    def __init__(self, have_version: _Optional[int] = ..., resume_version: _Optional[int] = ..., resume_offset: _Optional[int] = ..., one_transfer: _Optional[bool] = ...) -> None: ...

class ModelChunk(_message.Message):
    __slots__ = ("version", "offset", "total_bytes", "data", "manifest", "sha256", "encoding", "base_version", "crc32", "shard_bounds", "shard_map")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    TOTAL_BYTES_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    MANIFEST_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    ENCODING_FIELD_NUMBER: _ClassVar[int]
    BASE_VERSION_FIELD_NUMBER: _ClassVar[int]
    CRC32_FIELD_NUMBER: _ClassVar[int]
    SHARD_BOUNDS_FIELD_NUMBER: _ClassVar[int]
    SHARD_MAP_FIELD_NUMBER: _ClassVar[int]
    version: int
    offset: int
    total_bytes: int
    data: bytes
    manifest: _containers.RepeatedCompositeFieldContainer[TensorSpec]
    sha256: bytes
    encoding: str
    base_version: int
    crc32: int
    shard_bounds: _containers.RepeatedScalarFieldContainer[int]
    shard_map: bytes
    def __init__(self, version: _Optional[int] = ..., offset: _Optional[int] = ..., total_bytes: _Optional[int] = ..., data: _Optional[bytes] = ..., manifest: _Optional[_Iterable[_Union[TensorSpec, _Mapping]]] = ..., sha256: _Optional[bytes] = ..., encoding: _Optional[str] = ..., base_version: _Optional[int] = ..., crc32: _Optional[int] = ..., shard_bounds: _Optional[_Iterable[int]] = ..., shard_map: _Optional[bytes] = ...) -> None: ...

class DeltaHeader(_message.Message):
    __slots__ = ("base_version", "upload_id", "codec_header", "payload_bytes", "num_tokens", "num_samples", "local_steps", "init", "manifest", "report", "shard_map")
    BASE_VERSION_FIELD_NUMBER: _ClassVar[int]
    UPLOAD_ID_FIELD_NUMBER: _ClassVar[int]
    CODEC_HEADER_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_BYTES_FIELD_NUMBER: _ClassVar[int]
    NUM_TOKENS_FIELD_NUMBER: _ClassVar[int]
    NUM_SAMPLES_FIELD_NUMBER: _ClassVar[int]
    LOCAL_STEPS_FIELD_NUMBER: _ClassVar[int]
    INIT_FIELD_NUMBER: _ClassVar[int]
    MANIFEST_FIELD_NUMBER: _ClassVar[int]
    REPORT_FIELD_NUMBER: _ClassVar[int]
    SHARD_MAP_FIELD_NUMBER: _ClassVar[int]
    base_version: int
    upload_id: str
    codec_header: bytes
    payload_bytes: int
    num_tokens: int
    num_samples: int
    local_steps: int
    init: bool
    manifest: _containers.RepeatedCompositeFieldContainer[TensorSpec]
    report: ClientReport
    shard_map: bytes
    def __init__(self, base_version: _Optional[int] = ..., upload_id: _Optional[str] = ..., codec_header: _Optional[bytes] = ..., payload_bytes: _Optional[int] = ..., num_tokens: _Optional[int] = ..., num_samples: _Optional[int] = ..., local_steps: _Optional[int] = ..., init: _Optional[bool] = ..., manifest: _Optional[_Iterable[_Union[TensorSpec, _Mapping]]] = ..., report: _Optional[_Union[ClientReport, _Mapping]] = ..., shard_map: _Optional[bytes] = ...) -> None: ...

class DeltaPayload(_message.Message):
    __slots__ = ("offset", "data")
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    offset: int
    data: bytes
    def __init__(self, offset: _Optional[int] = ..., data: _Optional[bytes] = ...) -> None: ...

class DeltaTrailer(_message.Message):
    __slots__ = ("sha256",)
    SHA256_FIELD_NUMBER: _ClassVar[int]
    sha256: bytes
    def __init__(self, sha256: _Optional[bytes] = ...) -> None: ...

class DeltaChunk(_message.Message):
    __slots__ = ("header", "payload", "trailer")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    TRAILER_FIELD_NUMBER: _ClassVar[int]
    header: DeltaHeader
    payload: DeltaPayload
    trailer: DeltaTrailer
    def __init__(self, header: _Optional[_Union[DeltaHeader, _Mapping]] = ..., payload: _Optional[_Union[DeltaPayload, _Mapping]] = ..., trailer: _Optional[_Union[DeltaTrailer, _Mapping]] = ...) -> None: ...

class PushResult(_message.Message):
    __slots__ = ("status", "version", "staleness", "weight", "message", "aggregation_mode")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    STALENESS_FIELD_NUMBER: _ClassVar[int]
    WEIGHT_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    AGGREGATION_MODE_FIELD_NUMBER: _ClassVar[int]
    status: PushStatus
    version: int
    staleness: int
    weight: float
    message: str
    aggregation_mode: str
    def __init__(self, status: _Optional[_Union[PushStatus, str]] = ..., version: _Optional[int] = ..., staleness: _Optional[int] = ..., weight: _Optional[float] = ..., message: _Optional[str] = ..., aggregation_mode: _Optional[str] = ...) -> None: ...

class ClientReport(_message.Message):
    __slots__ = ("train_loss", "eval_loss", "tokens_per_s", "bytes_sent", "step", "idle_s", "round_base_version", "round_steps", "round_tokens", "paradigm_metrics")
    class ParadigmMetricsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    TRAIN_LOSS_FIELD_NUMBER: _ClassVar[int]
    EVAL_LOSS_FIELD_NUMBER: _ClassVar[int]
    TOKENS_PER_S_FIELD_NUMBER: _ClassVar[int]
    BYTES_SENT_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    IDLE_S_FIELD_NUMBER: _ClassVar[int]
    ROUND_BASE_VERSION_FIELD_NUMBER: _ClassVar[int]
    ROUND_STEPS_FIELD_NUMBER: _ClassVar[int]
    ROUND_TOKENS_FIELD_NUMBER: _ClassVar[int]
    PARADIGM_METRICS_FIELD_NUMBER: _ClassVar[int]
    train_loss: float
    eval_loss: float
    tokens_per_s: float
    bytes_sent: int
    step: int
    idle_s: float
    round_base_version: int
    round_steps: int
    round_tokens: int
    paradigm_metrics: _containers.ScalarMap[str, float]
    def __init__(self, train_loss: _Optional[float] = ..., eval_loss: _Optional[float] = ..., tokens_per_s: _Optional[float] = ..., bytes_sent: _Optional[int] = ..., step: _Optional[int] = ..., idle_s: _Optional[float] = ..., round_base_version: _Optional[int] = ..., round_steps: _Optional[int] = ..., round_tokens: _Optional[int] = ..., paradigm_metrics: _Optional[_Mapping[str, float]] = ...) -> None: ...

class HeartbeatRequest(_message.Message):
    __slots__ = ("report",)
    REPORT_FIELD_NUMBER: _ClassVar[int]
    report: ClientReport
    def __init__(self, report: _Optional[_Union[ClientReport, _Mapping]] = ...) -> None: ...

class HeartbeatResponse(_message.Message):
    __slots__ = ("session_ttl_s", "version")
    SESSION_TTL_S_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    session_ttl_s: float
    version: int
    def __init__(self, session_ttl_s: _Optional[float] = ..., version: _Optional[int] = ...) -> None: ...

class CreateTokenRequest(_message.Message):
    __slots__ = ("client_id", "site", "ttl_s", "master")
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    SITE_FIELD_NUMBER: _ClassVar[int]
    TTL_S_FIELD_NUMBER: _ClassVar[int]
    MASTER_FIELD_NUMBER: _ClassVar[int]
    client_id: str
    site: str
    ttl_s: float
    master: bool
    def __init__(self, client_id: _Optional[str] = ..., site: _Optional[str] = ..., ttl_s: _Optional[float] = ..., master: _Optional[bool] = ...) -> None: ...

class CreateTokenResponse(_message.Message):
    __slots__ = ("token", "expires_at")
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_AT_FIELD_NUMBER: _ClassVar[int]
    token: str
    expires_at: float
    def __init__(self, token: _Optional[str] = ..., expires_at: _Optional[float] = ...) -> None: ...

class SiteRequest(_message.Message):
    __slots__ = ("site", "rotate", "max_client_ids")
    SITE_FIELD_NUMBER: _ClassVar[int]
    ROTATE_FIELD_NUMBER: _ClassVar[int]
    MAX_CLIENT_IDS_FIELD_NUMBER: _ClassVar[int]
    site: str
    rotate: bool
    max_client_ids: int
    def __init__(self, site: _Optional[str] = ..., rotate: _Optional[bool] = ..., max_client_ids: _Optional[int] = ...) -> None: ...

class SiteCredentialResponse(_message.Message):
    __slots__ = ("credential",)
    CREDENTIAL_FIELD_NUMBER: _ClassVar[int]
    credential: str
    def __init__(self, credential: _Optional[str] = ...) -> None: ...

class RevokeSiteResponse(_message.Message):
    __slots__ = ("revoked",)
    REVOKED_FIELD_NUMBER: _ClassVar[int]
    revoked: bool
    def __init__(self, revoked: _Optional[bool] = ...) -> None: ...

class RevokeClientRequest(_message.Message):
    __slots__ = ("client_id", "token")
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    client_id: str
    token: str
    def __init__(self, client_id: _Optional[str] = ..., token: _Optional[str] = ...) -> None: ...

class RevokeClientResponse(_message.Message):
    __slots__ = ("tokens", "sessions")
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    SESSIONS_FIELD_NUMBER: _ClassVar[int]
    tokens: int
    sessions: int
    def __init__(self, tokens: _Optional[int] = ..., sessions: _Optional[int] = ...) -> None: ...

class ListClientsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ClientInfo(_message.Message):
    __slots__ = ("client_id", "site", "connected", "last_seen", "pushes", "bytes_in", "bytes_out", "report", "contribution", "tokens_trained", "update_mass", "share_window", "share_run", "compute_s", "state", "rejoins")
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    SITE_FIELD_NUMBER: _ClassVar[int]
    CONNECTED_FIELD_NUMBER: _ClassVar[int]
    LAST_SEEN_FIELD_NUMBER: _ClassVar[int]
    PUSHES_FIELD_NUMBER: _ClassVar[int]
    BYTES_IN_FIELD_NUMBER: _ClassVar[int]
    BYTES_OUT_FIELD_NUMBER: _ClassVar[int]
    REPORT_FIELD_NUMBER: _ClassVar[int]
    CONTRIBUTION_FIELD_NUMBER: _ClassVar[int]
    TOKENS_TRAINED_FIELD_NUMBER: _ClassVar[int]
    UPDATE_MASS_FIELD_NUMBER: _ClassVar[int]
    SHARE_WINDOW_FIELD_NUMBER: _ClassVar[int]
    SHARE_RUN_FIELD_NUMBER: _ClassVar[int]
    COMPUTE_S_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    REJOINS_FIELD_NUMBER: _ClassVar[int]
    client_id: str
    site: str
    connected: bool
    last_seen: float
    pushes: int
    bytes_in: int
    bytes_out: int
    report: ClientReport
    contribution: float
    tokens_trained: int
    update_mass: float
    share_window: float
    share_run: float
    compute_s: float
    state: str
    rejoins: int
    def __init__(self, client_id: _Optional[str] = ..., site: _Optional[str] = ..., connected: _Optional[bool] = ..., last_seen: _Optional[float] = ..., pushes: _Optional[int] = ..., bytes_in: _Optional[int] = ..., bytes_out: _Optional[int] = ..., report: _Optional[_Union[ClientReport, _Mapping]] = ..., contribution: _Optional[float] = ..., tokens_trained: _Optional[int] = ..., update_mass: _Optional[float] = ..., share_window: _Optional[float] = ..., share_run: _Optional[float] = ..., compute_s: _Optional[float] = ..., state: _Optional[str] = ..., rejoins: _Optional[int] = ...) -> None: ...

class ListClientsResponse(_message.Message):
    __slots__ = ("clients",)
    CLIENTS_FIELD_NUMBER: _ClassVar[int]
    clients: _containers.RepeatedCompositeFieldContainer[ClientInfo]
    def __init__(self, clients: _Optional[_Iterable[_Union[ClientInfo, _Mapping]]] = ...) -> None: ...

class StatusRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class StatusResponse(_message.Message):
    __slots__ = ("version", "connected_clients", "known_clients", "mode", "buffered_deltas", "last_train_loss", "last_eval_loss", "server_instance", "has_model", "num_parameters", "federation", "group", "ring_allreduces", "ring_members", "shards", "active_clients", "privacy_mode", "privacy_epsilon", "privacy_delta", "privacy_budget", "privacy_versions", "privacy_spent", "privacy_clip_norm", "privacy_noise_multiplier", "goodput", "goodput_tokens_trained", "goodput_tokens_applied")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    CONNECTED_CLIENTS_FIELD_NUMBER: _ClassVar[int]
    KNOWN_CLIENTS_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    BUFFERED_DELTAS_FIELD_NUMBER: _ClassVar[int]
    LAST_TRAIN_LOSS_FIELD_NUMBER: _ClassVar[int]
    LAST_EVAL_LOSS_FIELD_NUMBER: _ClassVar[int]
    SERVER_INSTANCE_FIELD_NUMBER: _ClassVar[int]
    HAS_MODEL_FIELD_NUMBER: _ClassVar[int]
    NUM_PARAMETERS_FIELD_NUMBER: _ClassVar[int]
    FEDERATION_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    RING_ALLREDUCES_FIELD_NUMBER: _ClassVar[int]
    RING_MEMBERS_FIELD_NUMBER: _ClassVar[int]
    SHARDS_FIELD_NUMBER: _ClassVar[int]
    ACTIVE_CLIENTS_FIELD_NUMBER: _ClassVar[int]
    PRIVACY_MODE_FIELD_NUMBER: _ClassVar[int]
    PRIVACY_EPSILON_FIELD_NUMBER: _ClassVar[int]
    PRIVACY_DELTA_FIELD_NUMBER: _ClassVar[int]
    PRIVACY_BUDGET_FIELD_NUMBER: _ClassVar[int]
    PRIVACY_VERSIONS_FIELD_NUMBER: _ClassVar[int]
    PRIVACY_SPENT_FIELD_NUMBER: _ClassVar[int]
    PRIVACY_CLIP_NORM_FIELD_NUMBER: _ClassVar[int]
    PRIVACY_NOISE_MULTIPLIER_FIELD_NUMBER: _ClassVar[int]
    GOODPUT_FIELD_NUMBER: _ClassVar[int]
    GOODPUT_TOKENS_TRAINED_FIELD_NUMBER: _ClassVar[int]
    GOODPUT_TOKENS_APPLIED_FIELD_NUMBER: _ClassVar[int]
    version: int
    connected_clients: int
    known_clients: int
    mode: str
    buffered_deltas: int
    last_train_loss: float
    last_eval_loss: float
    server_instance: str
    has_model: bool
    num_parameters: int
    federation: str
    group: str
    ring_allreduces: int
    ring_members: _containers.RepeatedScalarFieldContainer[str]
    shards: _containers.RepeatedCompositeFieldContainer[ShardStatus]
    active_clients: int
    privacy_mode: str
    privacy_epsilon: float
    privacy_delta: float
    privacy_budget: float
    privacy_versions: int
    privacy_spent: bool
    privacy_clip_norm: float
    privacy_noise_multiplier: float
    goodput: float
    goodput_tokens_trained: int
    goodput_tokens_applied: int
    def __init__(self, version: _Optional[int] = ..., connected_clients: _Optional[int] = ..., known_clients: _Optional[int] = ..., mode: _Optional[str] = ..., buffered_deltas: _Optional[int] = ..., last_train_loss: _Optional[float] = ..., last_eval_loss: _Optional[float] = ..., server_instance: _Optional[str] = ..., has_model: _Optional[bool] = ..., num_parameters: _Optional[int] = ..., federation: _Optional[str] = ..., group: _Optional[str] = ..., ring_allreduces: _Optional[int] = ..., ring_members: _Optional[_Iterable[str]] = ..., shards: _Optional[_Iterable[_Union[ShardStatus, _Mapping]]] = ..., active_clients: _Optional[int] = ..., privacy_mode: _Optional[str] = ..., privacy_epsilon: _Optional[float] = ..., privacy_delta: _Optional[float] = ..., privacy_budget: _Optional[float] = ..., privacy_versions: _Optional[int] = ..., privacy_spent: _Optional[bool] = ..., privacy_clip_norm: _Optional[float] = ..., privacy_noise_multiplier: _Optional[float] = ..., goodput: _Optional[float] = ..., goodput_tokens_trained: _Optional[int] = ..., goodput_tokens_applied: _Optional[int] = ...) -> None: ...

class ShardStatus(_message.Message):
    __slots__ = ("index", "address", "up", "version", "numel", "instance", "last_error")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    UP_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    NUMEL_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_FIELD_NUMBER: _ClassVar[int]
    LAST_ERROR_FIELD_NUMBER: _ClassVar[int]
    index: int
    address: str
    up: bool
    version: int
    numel: int
    instance: str
    last_error: str
    def __init__(self, index: _Optional[int] = ..., address: _Optional[str] = ..., up: _Optional[bool] = ..., version: _Optional[int] = ..., numel: _Optional[int] = ..., instance: _Optional[str] = ..., last_error: _Optional[str] = ...) -> None: ...

class RingKey(_message.Message):
    __slots__ = ("version", "members", "attempt")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    version: int
    members: _containers.RepeatedScalarFieldContainer[str]
    attempt: int
    def __init__(self, version: _Optional[int] = ..., members: _Optional[_Iterable[str]] = ..., attempt: _Optional[int] = ...) -> None: ...

class GroupWeight(_message.Message):
    __slots__ = ("group", "weight", "count")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    WEIGHT_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    group: str
    weight: float
    count: int
    def __init__(self, group: _Optional[str] = ..., weight: _Optional[float] = ..., count: _Optional[int] = ...) -> None: ...

class RingStepRequest(_message.Message):
    __slots__ = ("federation", "layout", "sender", "key", "phase", "step", "payload", "meta", "candidates")
    FEDERATION_FIELD_NUMBER: _ClassVar[int]
    LAYOUT_FIELD_NUMBER: _ClassVar[int]
    SENDER_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    PHASE_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    META_FIELD_NUMBER: _ClassVar[int]
    CANDIDATES_FIELD_NUMBER: _ClassVar[int]
    federation: str
    layout: bytes
    sender: str
    key: RingKey
    phase: str
    step: int
    payload: bytes
    meta: _containers.RepeatedCompositeFieldContainer[GroupWeight]
    candidates: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, federation: _Optional[str] = ..., layout: _Optional[bytes] = ..., sender: _Optional[str] = ..., key: _Optional[_Union[RingKey, _Mapping]] = ..., phase: _Optional[str] = ..., step: _Optional[int] = ..., payload: _Optional[bytes] = ..., meta: _Optional[_Iterable[_Union[GroupWeight, _Mapping]]] = ..., candidates: _Optional[_Iterable[str]] = ...) -> None: ...

class RingStepResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class RingAbortRequest(_message.Message):
    __slots__ = ("federation", "sender", "key")
    FEDERATION_FIELD_NUMBER: _ClassVar[int]
    SENDER_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    federation: str
    sender: str
    key: RingKey
    def __init__(self, federation: _Optional[str] = ..., sender: _Optional[str] = ..., key: _Optional[_Union[RingKey, _Mapping]] = ...) -> None: ...

class RingAbortResponse(_message.Message):
    __slots__ = ("state",)
    STATE_FIELD_NUMBER: _ClassVar[int]
    state: str
    def __init__(self, state: _Optional[str] = ...) -> None: ...

class RingJoinRequest(_message.Message):
    __slots__ = ("federation", "sender")
    FEDERATION_FIELD_NUMBER: _ClassVar[int]
    SENDER_FIELD_NUMBER: _ClassVar[int]
    federation: str
    sender: str
    def __init__(self, federation: _Optional[str] = ..., sender: _Optional[str] = ...) -> None: ...

class RingJoinResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class FetchModelRequest(_message.Message):
    __slots__ = ("federation", "sender", "header_only")
    FEDERATION_FIELD_NUMBER: _ClassVar[int]
    SENDER_FIELD_NUMBER: _ClassVar[int]
    HEADER_ONLY_FIELD_NUMBER: _ClassVar[int]
    federation: str
    sender: str
    header_only: bool
    def __init__(self, federation: _Optional[str] = ..., sender: _Optional[str] = ..., header_only: _Optional[bool] = ...) -> None: ...

class PeerModelChunk(_message.Message):
    __slots__ = ("version", "members", "manifest", "state_json", "array", "offset", "total_bytes", "data", "dtype", "shape", "sha256")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    MANIFEST_FIELD_NUMBER: _ClassVar[int]
    STATE_JSON_FIELD_NUMBER: _ClassVar[int]
    ARRAY_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    TOTAL_BYTES_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    DTYPE_FIELD_NUMBER: _ClassVar[int]
    SHAPE_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    version: int
    members: _containers.RepeatedScalarFieldContainer[str]
    manifest: _containers.RepeatedCompositeFieldContainer[TensorSpec]
    state_json: str
    array: str
    offset: int
    total_bytes: int
    data: bytes
    dtype: str
    shape: _containers.RepeatedScalarFieldContainer[int]
    sha256: bytes
    def __init__(self, version: _Optional[int] = ..., members: _Optional[_Iterable[str]] = ..., manifest: _Optional[_Iterable[_Union[TensorSpec, _Mapping]]] = ..., state_json: _Optional[str] = ..., array: _Optional[str] = ..., offset: _Optional[int] = ..., total_bytes: _Optional[int] = ..., data: _Optional[bytes] = ..., dtype: _Optional[str] = ..., shape: _Optional[_Iterable[int]] = ..., sha256: _Optional[bytes] = ...) -> None: ...

class CheckSessionRequest(_message.Message):
    __slots__ = ("session",)
    SESSION_FIELD_NUMBER: _ClassVar[int]
    session: str
    def __init__(self, session: _Optional[str] = ...) -> None: ...

class CheckSessionResponse(_message.Message):
    __slots__ = ("client_id",)
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    client_id: str
    def __init__(self, client_id: _Optional[str] = ...) -> None: ...

class SplitTensor(_message.Message):
    __slots__ = ("name", "shape", "data")
    NAME_FIELD_NUMBER: _ClassVar[int]
    SHAPE_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    name: str
    shape: _containers.RepeatedScalarFieldContainer[int]
    data: bytes
    def __init__(self, name: _Optional[str] = ..., shape: _Optional[_Iterable[int]] = ..., data: _Optional[bytes] = ...) -> None: ...

class SplitMessage(_message.Message):
    __slots__ = ("kind", "tensors", "batches")
    KIND_FIELD_NUMBER: _ClassVar[int]
    TENSORS_FIELD_NUMBER: _ClassVar[int]
    BATCHES_FIELD_NUMBER: _ClassVar[int]
    kind: str
    tensors: _containers.RepeatedCompositeFieldContainer[SplitTensor]
    batches: int
    def __init__(self, kind: _Optional[str] = ..., tensors: _Optional[_Iterable[_Union[SplitTensor, _Mapping]]] = ..., batches: _Optional[int] = ...) -> None: ...
