"""The user simulators: the transparent rule user, the LLM user's prompt and parser, and the registry keyed by
`user.backend`.
"""
