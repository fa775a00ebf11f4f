"""What the NGC-scale stand-ins of each release hold, package by package (TRITON-FACTS sections 9, 10).

Runtime libraries are NVIDIA's real ones, from PyPI wheels (pinned), laid out under NGC's paths
with NGC's versioned file names and soname links. What cannot be had here is generated to size
and says so in its package description: static archives, Nsight trees, HPC-X's UCC. Sizes of
generated files are estimates of NGC's ("about"), chosen so the image weighs what NGC's does.
One `Recipe` a release: 24.09 (CUDA 12.6, Ubuntu 22.04 generation) and 26.07 (CUDA 13, the
Ubuntu 24.04 generation with a root-owned Triton tree).
"""

from __future__ import annotations

from dataclasses import dataclass


SYSTEM_LIB = "usr/lib/x86_64-linux-gnu"
SYSTEM_INCLUDE = "usr/include"
MB = 1_000_000


def cuda_lib(cuda: str) -> str:
    """Where NVIDIA's CUDA images keep the toolkit's libraries, e.g. cuda-12.6."""
    return f"usr/local/cuda-{cuda}/targets/x86_64-linux/lib"


def cuda_include(cuda: str) -> str:
    return f"usr/local/cuda-{cuda}/targets/x86_64-linux/include"


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


def _cuda(cuda: str, deb: str, wheel: str, runtime: str, version: str,
          libs: tuple[tuple[str, str | None], ...], static: tuple[tuple[str, int], ...] = ()) -> Family:
    """A CUDA toolkit family under cuda-<cuda>'s folders; NVIDIA names its packages <runtime>-<deb>
    and <runtime>-dev-<deb> (cuda-cudart-12-6, cuda-cudart-dev-12-6)."""
    return Family(wheel, f"{runtime}-{deb}", f"{runtime}-dev-{deb}", f"{version}-1", libs, cuda_lib(cuda), cuda_include(cuda), static)


def _families_24_09() -> tuple[Family, ...]:
    cuda = "12.6"

    def c(wheel, runtime, version, libs, static=()):
        return _cuda(cuda, "12-6", wheel, runtime, version, libs, static)

    return (
        c("nvidia-cuda-runtime-cu12==12.6.68", "cuda-cudart", "12.6.68",
          (("nvidia/cuda_runtime/lib/libcudart.so.12", "12.6.68"),), (("libcudart_static.a", 1 * MB),)),
        c("nvidia-cublas-cu12==12.6.3.3", "libcublas", "12.6.3.3",
          (("nvidia/cublas/lib/libcublas.so.12", "12.6.3.3"), ("nvidia/cublas/lib/libcublasLt.so.12", "12.6.3.3"),
           ("nvidia/cublas/lib/libnvblas.so.12", "12.6.3.3")),
          (("libcublas_static.a", 600 * MB), ("libcublasLt_static.a", 400 * MB))),
        c("nvidia-cufft-cu12==11.2.6.59", "libcufft", "11.2.6.59",
          (("nvidia/cufft/lib/libcufft.so.11", "11.2.6.59"), ("nvidia/cufft/lib/libcufftw.so.11", "11.2.6.59")),
          (("libcufft_static.a", 300 * MB),)),
        c("nvidia-curand-cu12==10.3.7.68", "libcurand", "10.3.7.68",
          (("nvidia/curand/lib/libcurand.so.10", "10.3.7.68"),), (("libcurand_static.a", 100 * MB),)),
        c("nvidia-cusparse-cu12==12.5.3.3", "libcusparse", "12.5.3.3",
          (("nvidia/cusparse/lib/libcusparse.so.12", "12.5.3.3"),), (("libcusparse_static.a", 300 * MB),)),
        c("nvidia-cusolver-cu12==11.6.4.69", "libcusolver", "11.6.4.69",
          (("nvidia/cusolver/lib/libcusolver.so.11", "11.6.4.69"), ("nvidia/cusolver/lib/libcusolverMg.so.11", "11.6.4.69")),
          (("libcusolver_static.a", 150 * MB),)),
        c("nvidia-nvjitlink-cu12==12.6.68", "libnvjitlink", "12.6.68",
          (("nvidia/nvjitlink/lib/libnvJitLink.so.12", "12.6.68"),), (("libnvJitLink_static.a", 50 * MB),)),
        c("nvidia-cuda-nvrtc-cu12==12.6.68", "cuda-nvrtc", "12.6.68",
          (("nvidia/cuda_nvrtc/lib/libnvrtc.so.12", "12.6.68"), ("nvidia/cuda_nvrtc/lib/libnvrtc-builtins.so.12.6", "12.6.68")),
          (("libnvrtc_static.a", 60 * MB),)),
        c("nvidia-cuda-cupti-cu12==12.6.68", "cuda-cupti", "12.6.68",
          (("nvidia/cuda_cupti/lib/libcupti.so.12", "12.6.68"), ("nvidia/cuda_cupti/lib/libnvperf_host.so", None),
           ("nvidia/cuda_cupti/lib/libnvperf_target.so", None), ("nvidia/cuda_cupti/lib/libpcsamplingutil.so", None),
           ("nvidia/cuda_cupti/lib/libcheckpoint.so", None))),
        c("nvidia-nvtx-cu12==12.6.77", "cuda-nvtx", "12.6.77", (("nvidia/nvtx/lib/libnvToolsExt.so.1", "1.0.0"),)),
        Family("nvidia-cudnn-cu12==9.4.0.58", "libcudnn9-cuda-12", "libcudnn9-dev-cuda-12", "9.4.0.58-1",
               tuple((f"nvidia/cudnn/lib/libcudnn{part}.so.9", "9.4.0") for part in (
                   "", "_adv", "_cnn", "_engines_precompiled", "_engines_runtime_compiled", "_graph", "_heuristic", "_ops")),
               SYSTEM_LIB, SYSTEM_INCLUDE, layer=2),
        Family("nvidia-nccl-cu12==2.22.3", "libnccl2", "libnccl-dev", "2.22.3-1+cuda12.6",
               (("nvidia/nccl/lib/libnccl.so.2", "2.22.3"),), SYSTEM_LIB, SYSTEM_INCLUDE,
               (("libnccl_static.a", 160 * MB),), layer=2),
    )


def _families_26_07() -> tuple[Family, ...]:
    """CUDA 13.0: what torch 2.14.1 on PyPI is built against (its cuda-toolkit 13.0.3 pins). The
    CUDA 13 wheels keep every toolkit library in one folder, nvidia/cu13/lib."""
    cuda = "13.0"
    lib = "nvidia/cu13/lib/"

    def c(wheel, runtime, version, libs, static=()):
        return _cuda(cuda, "13-0", wheel, runtime, version, tuple((lib + m, v) for m, v in libs), static)

    return (
        c("nvidia-cuda-runtime==13.0.96", "cuda-cudart", "13.0.96", (("libcudart.so.13", "13.0.96"),),
          (("libcudart_static.a", 1 * MB),)),
        c("nvidia-cublas==13.1.1.3", "libcublas", "13.1.1.3",
          (("libcublas.so.13", "13.1.1.3"), ("libcublasLt.so.13", "13.1.1.3"), ("libnvblas.so.13", "13.1.1.3")),
          (("libcublas_static.a", 450 * MB), ("libcublasLt_static.a", 550 * MB))),
        c("nvidia-cufft==12.0.0.61", "libcufft", "12.0.0.61",
          (("libcufft.so.12", "12.0.0.61"), ("libcufftw.so.12", "12.0.0.61")), (("libcufft_static.a", 300 * MB),)),
        c("nvidia-curand==10.4.0.35", "libcurand", "10.4.0.35", (("libcurand.so.10", "10.4.0.35"),),
          (("libcurand_static.a", 130 * MB),)),
        c("nvidia-cusparse==12.6.3.3", "libcusparse", "12.6.3.3", (("libcusparse.so.12", "12.6.3.3"),),
          (("libcusparse_static.a", 200 * MB),)),
        c("nvidia-cusolver==12.0.4.66", "libcusolver", "12.0.4.66",
          (("libcusolver.so.12", "12.0.4.66"), ("libcusolverMg.so.12", "12.0.4.66")), (("libcusolver_static.a", 150 * MB),)),
        c("nvidia-nvjitlink==13.0.88", "libnvjitlink", "13.0.88", (("libnvJitLink.so.13", "13.0.88"),),
          (("libnvJitLink_static.a", 80 * MB),)),
        c("nvidia-cuda-nvrtc==13.0.88", "cuda-nvrtc", "13.0.88",
          (("libnvrtc.so.13", "13.0.88"), ("libnvrtc-builtins.so.13.0", "13.0.88"),
           ("libnvrtc.alt.so.13", None), ("libnvrtc-builtins.alt.so.13.0", None)), (("libnvrtc_static.a", 80 * MB),)),
        c("nvidia-cuda-cupti==13.0.85", "cuda-cupti", "13.0.85",
          (("libcupti.so.13", "13.0.85"), ("libnvperf_host.so", None), ("libnvperf_target.so", None),
           ("libpcsamplingutil.so", None), ("libcheckpoint.so", None))),
        # CUDA 13 drops libnvToolsExt (NVTX 3 is headers and this interop library).
        c("nvidia-nvtx==13.0.85", "cuda-nvtx", "13.0.85", (("libnvtx3interop.so.1", None),)),
        c("nvidia-cufile==1.15.1.6", "libcufile", "1.15.1.6", (("libcufile.so.0", "1.15.1"), ("libcufile_rdma.so.1", "1.15.1"))),
        Family("nvidia-cudnn-cu13==9.24.0.43", "libcudnn9-cuda-13", "libcudnn9-dev-cuda-13", "9.24.0.43-1",
               tuple((f"nvidia/cudnn/lib/libcudnn{part}.so.9", "9.24.0") for part in (
                   "", "_adv", "_cnn", "_engines_precompiled", "_engines_runtime_compiled", "_engines_tensor_ir",
                   "_ext", "_graph", "_heuristic", "_ops")),
               SYSTEM_LIB, SYSTEM_INCLUDE, layer=2),
        Family("nvidia-nccl-cu13==2.30.7", "libnccl2", "libnccl-dev", "2.30.7-1+cuda13.0",
               (("nvidia/nccl/lib/libnccl.so.2", "2.30.7"),), SYSTEM_LIB, SYSTEM_INCLUDE,
               (("libnccl_static.a", 200 * MB),), layer=2),
        # cuSPARSELt and NVSHMEM: libtorch_cuda of this generation NEEDs them (torch's pins).
        Family("nvidia-cusparselt-cu13==0.8.1", "libcusparselt0-cuda-13", "libcusparselt-dev-cuda-13", "0.8.1.1-1",
               (("nvidia/cusparselt/lib/libcusparseLt.so.0", "0.8.1.1"),), SYSTEM_LIB, SYSTEM_INCLUDE, layer=2),
        Family("nvidia-nvshmem-cu13==3.4.5", "libnvshmem3-cuda-13", "libnvshmem3-dev-cuda-13", "3.4.5-1",
               tuple((f"nvidia/nvshmem/lib/{name}.so.3", "3.4.5") for name in (
                   "libnvshmem_host", "nvshmem_bootstrap_mpi", "nvshmem_bootstrap_pmi", "nvshmem_bootstrap_pmi2",
                   "nvshmem_bootstrap_pmix", "nvshmem_bootstrap_shmem", "nvshmem_bootstrap_uid",
                   "nvshmem_transport_ibdevx", "nvshmem_transport_ibgda", "nvshmem_transport_ibrc",
                   "nvshmem_transport_libfabric", "nvshmem_transport_ucx")),
               SYSTEM_LIB, SYSTEM_INCLUDE, layer=2),
    )


@dataclass(frozen=True)
class TensorRT:
    """TensorRT cannot be had here (section 9): stand-in libraries with its sonames, built by the
    recipe and padded to about the real files' sizes."""

    version: str  # major.minor.patch: the stand-ins' file names and what getInferLibVersion says
    deb_version: str
    libs: tuple[tuple[str, str, int], ...]  # (file stem, package, about bytes): file is <stem>.so.<version>
    depends: str  # the cuDNN runtime package libnvinfer depends on

    def files(self) -> tuple[tuple[str, str, int], ...]:
        return tuple((f"{stem}.so.{self.version}", package, size) for stem, package, size in self.libs)


def _tensorrt(version: str, deb_version: str, depends: str, nvinfer: int, builder: int, plugin: int, parser: int) -> TensorRT:
    return TensorRT(version, deb_version, (
        ("libnvinfer", "libnvinfer10", nvinfer),
        ("libnvinfer_builder_resource", "libnvinfer10", builder),
        ("libnvinfer_plugin", "libnvinfer-plugin10", plugin),
        ("libnvonnxparser", "libnvonnxparsers10", parser),
    ), depends)


@dataclass(frozen=True)
class Generated:
    """A package of generated (pseudo-random) bytes standing in for a tree NGC's min carries."""

    package: str
    version: str
    what: str
    files: tuple[tuple[str, int], ...]  # (path in the image, about bytes)
    depends: tuple[str, ...] = ()
    links: tuple[tuple[str, str], ...] = ()  # (path, target)


def _generated(systems: str, compute: str) -> tuple[Generated, ...]:
    return (
        Generated(f"nsight-systems-{systems.rsplit('.', 1)[0]}", f"{systems}-1", f"Nsight Systems {systems}",
                  tuple((f"opt/nvidia/nsight-systems/{systems.rsplit('.', 1)[0]}/target-linux-x64/bulk-{n:02}.bin", 150 * MB)
                        for n in range(5))),
        Generated(f"nsight-compute-{compute.rsplit('.', 1)[0]}", f"{compute}-1", f"Nsight Compute {compute}",
                  tuple((f"opt/nvidia/nsight-compute/{compute.rsplit('.', 1)[0]}/target/linux-desktop-glibc_2_11_3-x64/bulk-{n:02}.bin",
                         125 * MB) for n in range(4))),
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


@dataclass(frozen=True)
class Recipe:
    """Everything one release's NGC-scale stand-ins are made of."""

    release: str
    cuda: str  # the toolkit folder's version, cuda-<cuda>
    env: tuple[tuple[str, str], ...]  # NGC's ENV of the min image (CUDA_VERSION, ...)
    families: tuple[Family, ...]
    tensorrt: TensorRT
    generated: tuple[Generated, ...]
    ort_wheel: str  # ONNX Runtime and libtorch: the real libraries, from these wheels
    ort_version: str
    torch_wheel: str
    size_standins: tuple[tuple[str, tuple[tuple[str, int], ...]], ...]  # NGC's other backends, by size
    note: str  # what the record says about where the backends' libraries come from

    @property
    def cudart(self) -> Family:
        return next(f for f in self.families if f.runtime.startswith("cuda-cudart-"))

    @property
    def cudart_member(self) -> str:
        return self.cudart.libs[0][0]

    @property
    def cuda_major(self) -> str:
        return self.cuda.split(".")[0]

    def wheel_requirements(self) -> tuple[str, ...]:
        return tuple(family.wheel for family in self.families)

    def check_libraries(self) -> tuple[str, ...]:
        """Libraries the min image's loader must find (the build checks)."""
        major = self.cuda_major
        return (f"libcudart.so.{major}", f"libcublasLt.so.{major}", "libcudnn.so.9", "libnccl.so.2")


# libtorch's libraries NGC's pytorch backend folder carries (the wheel's python binding stays out).
TORCH_LEAVE_OUT = ("libtorch_python.so",)

RECIPES: dict[str, Recipe] = {
    "24.09": Recipe(
        release="24.09", cuda="12.6",
        env=(("CUDA_VERSION", "12.6.1"), ("CUDA_DRIVER_VERSION", "560.35.03"), ("CUDNN_VERSION", "9.4.0.58"),
             ("NCCL_VERSION", "2.22.3"), ("TRT_VERSION", "10.4.0.26")),
        families=_families_24_09(),
        tensorrt=_tensorrt("10.4.0", "10.4.0.26-1+cuda12.6", "libcudnn9-cuda-12",
                           450 * MB, 1_600 * MB, 35 * MB, 3 * MB),
        generated=_generated("2024.5.1.113", "2024.3.1.2"),
        ort_wheel="onnxruntime-gpu==1.19.2", ort_version="1.19.2", torch_wheel="torch==2.5.1",
        size_standins=(
            ("dali", (("dali-bulk-00.bin", 750 * MB), ("dali-bulk-01.bin", 750 * MB))),
            ("fil", (("fil-bulk-00.bin", 900 * MB),)),
            ("openvino", (("openvino-bulk-00.bin", 600 * MB),)),
            ("tensorflow", (("tensorflow-bulk-00.bin", 1_150 * MB), ("tensorflow-bulk-01.bin", 1_150 * MB))),
            ("repeat", (("repeat-bulk-00.bin", 1 * MB),)),
            ("square", (("square-bulk-00.bin", 1 * MB),)),
        ),
        note="ONNX Runtime 1.19.2 (onnxruntime-gpu, CUDA 12) and libtorch 2.5.1 (torch, CUDA 12.4 build)",
    ),
    "26.07": Recipe(
        release="26.07", cuda="13.0",
        env=(("CUDA_VERSION", "13.0.2"), ("CUDA_DRIVER_VERSION", "580.95.05"), ("CUDNN_VERSION", "9.24.0.43"),
             ("NCCL_VERSION", "2.30.7"), ("TRT_VERSION", "10.13.3.9")),
        families=_families_26_07(),
        # TensorRT 10.13 for CUDA 13; its builder resource weighs about 2.6 GB from 25.01 (issue 7932).
        tensorrt=_tensorrt("10.13.3", "10.13.3.9-1+cuda13.0", "libcudnn9-cuda-13",
                           600 * MB, 2_000 * MB, 40 * MB, 4 * MB),
        generated=_generated("2025.5.1.121", "2025.3.1.4"),
        # PyPI has CUDA 13 builds of both (onnxruntime-gpu 1.31.1: libcublas.so.13; torch 2.14.1: cu13 pins).
        ort_wheel="onnxruntime-gpu==1.31.1", ort_version="1.31.1", torch_wheel="torch==2.14.1",
        # tensorflow is gone after 25.03; DALI, FIL and OpenVINO grew.
        size_standins=(
            ("dali", (("dali-bulk-00.bin", 1_000 * MB), ("dali-bulk-01.bin", 1_000 * MB))),
            ("fil", (("fil-bulk-00.bin", 1_000 * MB),)),
            ("openvino", (("openvino-bulk-00.bin", 1_000 * MB),)),
            ("repeat", (("repeat-bulk-00.bin", 1 * MB),)),
            ("square", (("square-bulk-00.bin", 1 * MB),)),
        ),
        note="CUDA 13 builds from PyPI: ONNX Runtime 1.31.1 (onnxruntime-gpu) and libtorch 2.14.1 (torch)",
    ),
}


def versioned(member: str, version: str | None) -> tuple[str, str | None]:
    """(NGC's file name, the soname link to it or None) for a library the wheel names by soname."""
    soname = member.rsplit("/", 1)[-1]
    if version is None:
        return soname, None
    stem = soname.split(".so", 1)[0]
    return f"{stem}.so.{version}", soname
