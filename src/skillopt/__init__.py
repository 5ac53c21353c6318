"""skillopt: validation-gated optimization of LLM agent skill documents."""

__version__ = "0.1.0"
