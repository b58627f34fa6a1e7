"""agentcontext for the LiteLLM proxy: every request fits its model's window (docs/litellm.md).

config.yaml, in this directory, installs it with ``litellm_settings: callbacks: agentcontext_hook.hook``.
"""

from agentcontext.integrations.litellm import ContextHook

# Windows come from model_info.max_input_tokens in config.yaml (else from the model's name);
# ContextHook(window=..., reserve=...) overrides them for every model.
hook = ContextHook()
