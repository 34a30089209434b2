"""Jinja2 prompts: a problem into the first request, a verdict into refinement feedback."""

from prompts.render import Target, Turn, chat_messages, format_tolerance, render_feedback, render_prompt, render_system

__all__ = ["Target", "Turn", "chat_messages", "format_tolerance", "render_feedback", "render_prompt", "render_system"]
