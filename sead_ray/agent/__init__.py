"""The agent side of a call: its prompt and parser, the token-exact context, scripted agents (the battery's), endpoints
and the served agent's request handling.
"""
