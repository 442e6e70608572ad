"""Split learning (FSL-SAGE): the model's parts on either side of the cut (`parts`), shared by the client
paradigm (`client_agent.paradigms.fsl_sage`) and the server-side trainer (`trainer`, its own process:
`python -m client_agent.split.trainer`), which holds the blocks past the cut beside the torch-free PS."""
