"""What the NGC-scale min stand-in of 24.09 holds, package by package (TRITON-FACTS section 9).

Runtime libraries are NVIDIA's real ones, from PyPI wheels (pinned), laid out under NGC's paths
with NGC's versioned file names and soname links. What cannot be had here is generated to size
and says so in its package description: static archives, Nsight trees, HPC-X's UCC. Sizes of
generated files are estimates of NGC 24.09's ("about"), chosen so the image weighs what NGC's does.
"""

from __future__ import annotations

from dataclasses import dataclass


CUDA_LIB = "usr/local/cuda-12.6/targets/x86_64-linux/lib"
CUDA_INCLUDE = "usr/local/cuda-12.6/targets/x86_64-linux/include"
SYSTEM_LIB = "usr/lib/x86_64-linux-gnu"
SYSTEM_INCLUDE = "usr/include"
MB = 1_000_000


@dataclass(frozen=True)
class Family:
    """One NVIDIA library family: a runtime package and a -dev package made from one wheel."""

    wheel: str  # pinned requirement
    runtime: str  # NVIDIA's package names
    dev: str
    version: str  # the Debian version NVIDIA gives the packages
    libs: tuple[tuple[str, str | None], ...]  # (file in the wheel, NGC's file version or None: kept as is)
    lib_dir: str
    include_dir: str
    static: tuple[tuple[str, int], ...] = ()  # generated archives of the -dev package: (name, about bytes)
    layer: int = 1  # the RUN step installing the runtime package (all -dev packages share one)


FAMILIES: tuple[Family, ...] = (
    Family("nvidia-cuda-runtime-cu12==12.6.68", "cuda-cudart-12-6", "cuda-cudart-dev-12-6", "12.6.68-1",
           (("nvidia/cuda_runtime/lib/libcudart.so.12", "12.6.68"),), CUDA_LIB, CUDA_INCLUDE,
           (("libcudart_static.a", 1 * MB),)),
    Family("nvidia-cublas-cu12==12.6.3.3", "libcublas-12-6", "libcublas-dev-12-6", "12.6.3.3-1",
           (("nvidia/cublas/lib/libcublas.so.12", "12.6.3.3"), ("nvidia/cublas/lib/libcublasLt.so.12", "12.6.3.3"),
            ("nvidia/cublas/lib/libnvblas.so.12", "12.6.3.3")), CUDA_LIB, CUDA_INCLUDE,
           (("libcublas_static.a", 600 * MB), ("libcublasLt_static.a", 400 * MB))),
    Family("nvidia-cufft-cu12==11.2.6.59", "libcufft-12-6", "libcufft-dev-12-6", "11.2.6.59-1",
           (("nvidia/cufft/lib/libcufft.so.11", "11.2.6.59"), ("nvidia/cufft/lib/libcufftw.so.11", "11.2.6.59")),
           CUDA_LIB, CUDA_INCLUDE, (("libcufft_static.a", 300 * MB),)),
    Family("nvidia-curand-cu12==10.3.7.68", "libcurand-12-6", "libcurand-dev-12-6", "10.3.7.68-1",
           (("nvidia/curand/lib/libcurand.so.10", "10.3.7.68"),), CUDA_LIB, CUDA_INCLUDE,
           (("libcurand_static.a", 100 * MB),)),
    Family("nvidia-cusparse-cu12==12.5.3.3", "libcusparse-12-6", "libcusparse-dev-12-6", "12.5.3.3-1",
           (("nvidia/cusparse/lib/libcusparse.so.12", "12.5.3.3"),), CUDA_LIB, CUDA_INCLUDE,
           (("libcusparse_static.a", 300 * MB),)),
    Family("nvidia-cusolver-cu12==11.6.4.69", "libcusolver-12-6", "libcusolver-dev-12-6", "11.6.4.69-1",
           (("nvidia/cusolver/lib/libcusolver.so.11", "11.6.4.69"), ("nvidia/cusolver/lib/libcusolverMg.so.11", "11.6.4.69")),
           CUDA_LIB, CUDA_INCLUDE, (("libcusolver_static.a", 150 * MB),)),
    Family("nvidia-nvjitlink-cu12==12.6.68", "libnvjitlink-12-6", "libnvjitlink-dev-12-6", "12.6.68-1",
           (("nvidia/nvjitlink/lib/libnvJitLink.so.12", "12.6.68"),), CUDA_LIB, CUDA_INCLUDE,
           (("libnvJitLink_static.a", 50 * MB),)),
    Family("nvidia-cuda-nvrtc-cu12==12.6.68", "cuda-nvrtc-12-6", "cuda-nvrtc-dev-12-6", "12.6.68-1",
           (("nvidia/cuda_nvrtc/lib/libnvrtc.so.12", "12.6.68"), ("nvidia/cuda_nvrtc/lib/libnvrtc-builtins.so.12.6", "12.6.68")),
           CUDA_LIB, CUDA_INCLUDE, (("libnvrtc_static.a", 60 * MB),)),
    Family("nvidia-cuda-cupti-cu12==12.6.68", "cuda-cupti-12-6", "cuda-cupti-dev-12-6", "12.6.68-1",
           (("nvidia/cuda_cupti/lib/libcupti.so.12", "12.6.68"), ("nvidia/cuda_cupti/lib/libnvperf_host.so", None),
            ("nvidia/cuda_cupti/lib/libnvperf_target.so", None), ("nvidia/cuda_cupti/lib/libpcsamplingutil.so", None),
            ("nvidia/cuda_cupti/lib/libcheckpoint.so", None)), CUDA_LIB, CUDA_INCLUDE),
    Family("nvidia-nvtx-cu12==12.6.77", "cuda-nvtx-12-6", "cuda-nvtx-dev-12-6", "12.6.77-1",
           (("nvidia/nvtx/lib/libnvToolsExt.so.1", "1.0.0"),), CUDA_LIB, CUDA_INCLUDE),
    Family("nvidia-cudnn-cu12==9.4.0.58", "libcudnn9-cuda-12", "libcudnn9-dev-cuda-12", "9.4.0.58-1",
           tuple((f"nvidia/cudnn/lib/libcudnn{part}.so.9", "9.4.0") for part in (
               "", "_adv", "_cnn", "_engines_precompiled", "_engines_runtime_compiled", "_graph", "_heuristic", "_ops")),
           SYSTEM_LIB, SYSTEM_INCLUDE, layer=2),
    Family("nvidia-nccl-cu12==2.22.3", "libnccl2", "libnccl-dev", "2.22.3-1+cuda12.6",
           (("nvidia/nccl/lib/libnccl.so.2", "2.22.3"),), SYSTEM_LIB, SYSTEM_INCLUDE,
           (("libnccl_static.a", 160 * MB),), layer=2),
)

# TensorRT 10.4.0 cannot be had here (section 9): stand-in libraries with its sonames, built by the
# recipe and padded to about the real files' sizes. (file, package, about bytes)
TENSORRT_VERSION = "10.4.0"
TENSORRT_DEB_VERSION = "10.4.0.26-1+cuda12.6"
TENSORRT_LIBS: tuple[tuple[str, str, int], ...] = (
    ("libnvinfer.so.10.4.0", "libnvinfer10", 450 * MB),
    ("libnvinfer_builder_resource.so.10.4.0", "libnvinfer10", 1_600 * MB),
    ("libnvinfer_plugin.so.10.4.0", "libnvinfer-plugin10", 35 * MB),
    ("libnvonnxparser.so.10.4.0", "libnvonnxparsers10", 3 * MB),
)


@dataclass(frozen=True)
class Generated:
    """A package of generated (pseudo-random) bytes standing in for a tree NGC's min carries."""

    package: str
    version: str
    what: str
    files: tuple[tuple[str, int], ...]  # (path in the image, about bytes)
    depends: tuple[str, ...] = ()
    links: tuple[tuple[str, str], ...] = ()  # (path, target)


GENERATED: tuple[Generated, ...] = (
    Generated("nsight-systems-2024.5.1", "2024.5.1.113-1", "Nsight Systems 2024.5.1",
              tuple((f"opt/nvidia/nsight-systems/2024.5.1/target-linux-x64/bulk-{n:02}.bin", 150 * MB) for n in range(5))),
    Generated("nsight-compute-2024.3.1", "2024.3.1.2-1", "Nsight Compute 2024.3.1",
              tuple((f"opt/nvidia/nsight-compute/2024.3.1/target/linux-desktop-glibc_2_11_3-x64/bulk-{n:02}.bin", 125 * MB)
                    for n in range(4))),
    # HPC-X: UCX and Open MPI are Debian's real ones (linked in), UCC (not in Debian) is generated.
    Generated("hpcx-2.20", "2.20-1", "HPC-X 2.20 (UCX and Open MPI from Debian, UCC generated)",
              (("opt/hpcx/ucc/lib/ucc/bulk-00.bin", 80 * MB),),
              depends=("libucx0", "libopenmpi3"),
              links=tuple((f"opt/hpcx/ucx/lib/{name}", f"/{SYSTEM_LIB}/{name}")
                          for name in ("libucp.so.0", "libucs.so.0", "libuct.so.0", "libucm.so.0"))
              + (("opt/hpcx/ompi/lib/libmpi.so.40", f"/{SYSTEM_LIB}/libmpi.so.40"),)),
)
# Debian's real compiler toolchain, installed with the tools (NGC's min builds backends).
DEBIAN_TOOLS = ("gcc", "g++", "make")


def wheel_requirements() -> tuple[str, ...]:
    return tuple(family.wheel for family in FAMILIES)


def versioned(member: str, version: str | None) -> tuple[str, str | None]:
    """(NGC's file name, the soname link to it or None) for a library the wheel names by soname."""
    soname = member.rsplit("/", 1)[-1]
    if version is None:
        return soname, None
    stem = soname.split(".so", 1)[0]
    return f"{stem}.so.{version}", soname

# The full image. ONNX Runtime and libtorch: the real libraries, from these wheels.
ORT_WHEEL = "onnxruntime-gpu==1.19.2"
ORT_VERSION = "1.19.2"
TORCH_WHEEL = "torch==2.5.1"
# libtorch's libraries NGC's pytorch backend folder carries (the wheel's python binding stays out).
TORCH_LEAVE_OUT = ("libtorch_python.so",)
# NGC's other backends of 24.09, as folders of generated bytes of about their size (no backend
# library: a model asking for them fails to load). (backend, ((file, about bytes), ...))
SIZE_STANDINS: tuple[tuple[str, tuple[tuple[str, int], ...]], ...] = (
    ("dali", (("dali-bulk-00.bin", 750 * MB), ("dali-bulk-01.bin", 750 * MB))),
    ("fil", (("fil-bulk-00.bin", 900 * MB),)),
    ("openvino", (("openvino-bulk-00.bin", 600 * MB),)),
    ("tensorflow", (("tensorflow-bulk-00.bin", 1_150 * MB), ("tensorflow-bulk-01.bin", 1_150 * MB))),
    ("repeat", (("repeat-bulk-00.bin", 1 * MB),)),
    ("square", (("square-bulk-00.bin", 1 * MB),)),
)
