"""The LLM serving world: GPUs and models from published figures, and one continuous-batching server. Pure."""
