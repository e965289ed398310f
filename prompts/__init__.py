"""Versioned prompt templates shipped with ragjudge (loaded by ragjudge.llm.prompts)."""
