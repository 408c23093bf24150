"""Prompt templates, output schemas and tolerant parsers for the agent and the user simulator.

The same renderer serves training and evaluation, so the agent never sees two prompt formats.
"""
from .agent import AgentTurnParse, agent_messages, agent_system_prompt, parse_agent_output
from .parsing import extract_json_object
from .user import parse_user_output, user_messages, user_output_schema

__all__ = [
    "AgentTurnParse", "agent_messages", "agent_system_prompt", "parse_agent_output",
    "extract_json_object", "parse_user_output", "user_messages", "user_output_schema",
]
