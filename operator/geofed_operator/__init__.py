"""The geofed Kubernetes operator (imported as `geofed_operator`).

One kopf operator, two roles: in the cloud it turns a `Federation` into the parameter server's
Deployment, Service, PVC and Secrets; at an institution it turns a `SiteClient` into client Jobs that
rejoin with fresh one-time tokens after preemption (paper §III-B4). Manifests come from pure
`build_*` functions; the kopf handlers in `handlers/` only wire them to the API.
"""
