"""Jinja2 prompts: a problem into the first request (with verified kernels of similar problems), a verdict into
refinement feedback, archive members into inspirations and crossover requests."""

from prompts.render import (Example, Program, Target, Turn, chat_messages, crossover_messages, format_tolerance, render_feedback,
                            render_prompt, render_system)

__all__ = ["Example", "Program", "Target", "Turn", "chat_messages", "crossover_messages", "format_tolerance", "render_feedback",
           "render_prompt", "render_system"]
