# Package gpu (CUDA/HIP loaded at run time). Its stand-in driver tests need
# only gcc and run in make test with the rest of go test ./....

.PHONY: gpu-check gpu-check-build

# The gpu and engine test binaries, built here without a GPU (no CUDA
# toolkit either), to run on a GPU machine that has no Go:
#   GPU_CHECK_BIN=bin/gpu-check/gpu.test ENGINE_CHECK_BIN=bin/gpu-check/engine.test examples/gpu/check.sh
gpu-check-build: deps
	$(GO) test -c -o $(BIN)/gpu-check/gpu.test ./gpu
	$(GO) test -c -o $(BIN)/gpu-check/engine.test ./engine

# Package gpu and the engine's device path against the real driver: probe,
# correctness, BenchmarkSync, BenchmarkGetDevice and BenchmarkGPUSync goals.
gpu-check: gpu-check-build
	GPU_CHECK_BIN=$(BIN)/gpu-check/gpu.test ENGINE_CHECK_BIN=$(BIN)/gpu-check/engine.test bash examples/gpu/check.sh
