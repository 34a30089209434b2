"""Jinja2 prompts: a problem into the first request, a verdict into refinement feedback, archive members into
inspirations and crossover requests."""

from prompts.render import (Program, Target, Turn, chat_messages, crossover_messages, format_tolerance, render_feedback,
                            render_prompt, render_system)

__all__ = ["Program", "Target", "Turn", "chat_messages", "crossover_messages", "format_tolerance", "render_feedback",
           "render_prompt", "render_system"]
