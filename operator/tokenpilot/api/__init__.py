"""The LLMService API: pydantic types that are the single source of truth for the CRD.

Pure data: no I/O, no Kubernetes client, no clock.
"""
