"""The weight trip from the trainer to the engines: the transports (sync), the shared-memory files, our gloo backend of
vLLM's weight-transfer API.
"""
