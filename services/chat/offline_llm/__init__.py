"""The built-in offline generator: an OpenAI-compatible chat-completions endpoint that answers
extractively from the numbered context in the system message. No model, no key, no network."""
