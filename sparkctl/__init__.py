"""sparkctl: provision, stage and serve DeepSeek-V4.1-Flash with SGLang on four DGX Sparks."""

__version__ = "0.1.0"
