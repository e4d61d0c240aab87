"""The tensor-program side of warpmap: task mappings, a kernel IR, code generation and builds."""
