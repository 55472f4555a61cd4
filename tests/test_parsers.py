"""Parsers over recorded real tool output (cuobjdump 13.5, binutils objdump, ptxas 13.0)."""

from __future__ import annotations

from pytest_ptxbench import device
from pytest_ptxbench.parsers import objdump, ptxas, sass
from pytest_ptxbench.targets import TARGETS

from .conftest import DATA


def test_sass_inventory_per_kernel_from_address_lines_only() -> None:
    kernels = sass.parse_sass((DATA / "two_kernels_sm90a.sass").read_text())
    assert set(kernels) == {"_Z38HGMMA_64x256x16_F32_BF16_UTMALDG_decoyPfi", "_Z12wgmma_kernelP13__nv_bfloat16mmi"}
    decoy = kernels["_Z38HGMMA_64x256x16_F32_BF16_UTMALDG_decoyPfi"]
    # the opcode-like words in its name and in `.headerflags @"..."` are not instructions
    assert not any(m.startswith(("HGMMA", "UTMALDG", "EF_")) for m in decoy.opcodes)
    assert decoy.arch == "sm_90a"
    wgmma = kernels["_Z12wgmma_kernelP13__nv_bfloat16mmi"]
    assert wgmma.opcodes["HGMMA.64x8x16.F32.BF16"] == 1


def test_predicates_are_stripped() -> None:
    kernels = sass.parse_sass((DATA / "two_kernels_sm90a.sass").read_text())
    for kernel in kernels.values():
        assert "EXIT" in kernel.opcodes  # `@P0 EXIT` counts as EXIT
        assert not any(m.startswith("@") for m in kernel.opcodes)
    assert sass.opcode_of("@!PT LDS RZ, [RZ] ") == "LDS"
    assert sass.opcode_of("@!UP0 UTMALDG.2D [UR8], [UR4]") == "UTMALDG.2D"


def test_a_kernel_listed_twice_is_counted_once() -> None:
    text = (DATA / "two_kernels_sm90a.sass").read_text()
    once = sass.parse_sass(text)
    twice = sass.parse_sass(text + "\n" + text)
    assert {n: k.opcodes for n, k in once.items()} == {n: k.opcodes for n, k in twice.items()}


def test_a_cubins_listing_names_its_architecture_without_a_fatbin_header() -> None:
    """`cuobjdump -sass file.cubin` (a Triton build's) has no `arch = ` line, only `code for`."""
    listing = (
        "\n\tcode for sm_90a\n\t\tFunction : gemm_kernel\n"
        '\t.headerflags\t@"EF_CUDA_SM90 EF_CUDA_VIRTUAL_SM(EF_CUDA_SM90)"\n'
        "        /*0000*/                   UTMALDG.2D [UR8], [UR4] ;  /* 0x00000008040075b4 */\n"
    )
    [kernel] = sass.parse_sass(listing).values()
    assert (kernel.name, kernel.arch, dict(kernel.opcodes)) == ("gemm_kernel", "sm_90a", {"UTMALDG.2D": 1})


def test_modifier_matching() -> None:
    assert sass.matches("HGMMA.*.F32.BF16", "HGMMA.64x256x16.F32.BF16")
    assert not sass.matches("HGMMA.*.F32.BF16", "HGMMA.64x256x16.F32")
    assert not sass.matches("HGMMA.*.F32.BF16", "HGMMA.64x256x16.F16.BF16")
    assert sass.matches("UTMALDG", "UTMALDG.2D.MULTICAST")
    assert not sass.matches("UTMALDG", "UTMASTG.2D")
    assert not sass.matches("HMMA", "HGMMA.64x8x16.F32.BF16")


def test_dynamic_symbols_and_needed_libraries() -> None:
    symbols = objdump.parse_dynamic_symbols((DATA / "launcher_dlopen.objdump-T.txt").read_text())
    undefined = {s.name for s in symbols if s.undefined}
    assert {"dlopen", "dlsym", "cudaGetLastError", "__cudaRegisterFatBinary"} <= undefined
    launcher = next(s for s in symbols if s.name == "ptxbench_gemm")
    assert not launcher.undefined and launcher.function and launcher.section == ".text"
    dlopen = next(s for s in symbols if s.name == "dlopen")
    assert dlopen.version == "(GLIBC_2.34)"
    needed = objdump.parse_needed((DATA / "launcher_dlopen.objdump-p.txt").read_text())
    assert needed == ["libcudart.so.13", "libstdc++.so.6", "libgcc_s.so.1", "libc.so.6"]


def test_host_instructions_with_their_function() -> None:
    found = objdump.find_instructions((DATA / "launcher_syscall.objdump-d.txt").read_text(), {"syscall"})
    assert [(i.function, i.mnemonic) for i in found] == [("ptxbench_gemm", "syscall")]


def test_ptxas_resources() -> None:
    log = (
        "ptxas info    : 0 bytes gmem\n"
        "ptxas info    : Compiling entry function '_Z4kernPf' for 'sm_90a'\n"
        "ptxas info    : Function properties for _Z4kernPf\n"
        "    8 bytes stack frame, 4 bytes spill stores, 4 bytes spill loads\n"
        "ptxas info    : Used 168 registers, used 1 barriers, 1024 bytes smem\n"
        "ptxas warning : (C7508) Potential Performance Loss: 'setmaxnreg' ignored\n"
    )
    assert ptxas.parse_resources(log) == {
        "_Z4kernPf": {
            "stack_bytes": 8,
            "spill_store_bytes": 4,
            "spill_load_bytes": 4,
            "registers": 168,
            "smem_bytes": 1024,
        }
    }
    assert ptxas.warnings(log) == ["ptxas warning : (C7508) Potential Performance Loss: 'setmaxnreg' ignored"]


def test_devices_from_nvidia_smi() -> None:
    devices = device.parse_devices((DATA / "nvidia-smi-query.csv").read_text())
    assert [(d.index, d.name, d.capability, d.arch, d.driver) for d in devices] == [
        (0, "NVIDIA H200", (9, 0), "sm_90", "580.159.04")
    ]
    assert devices[0].uuid.startswith("GPU-cbd0dcec")
    assert device.device_for(TARGETS["h100"], devices) == devices[0]
    assert device.device_for(TARGETS["b200"], devices) is None
    assert (
        device.missing_device(TARGETS["b200"], devices)
        == "needs an sm_100 device (B200-class), found NVIDIA H200 (sm_90)"
    )


def test_clocks_from_nvidia_smi() -> None:
    """Recorded on the H200 at rest: nvidia-smi prints `clocks.current.sm` for the `clocks.sm` asked for."""
    clocks = device.parse_clocks((DATA / "nvidia-smi-clocks.csv").read_text())
    assert clocks == {
        "0": {
            "clocks.current.sm [MHz]": "345 MHz",
            "clocks.current.memory [MHz]": "3201 MHz",
            "clocks.max.sm [MHz]": "1980 MHz",
            "clocks.max.memory [MHz]": "3201 MHz",
            "power.limit [W]": "700.00 W",
        }
    }
    assert device.parse_clocks("") == {}


def test_cuda_visible_devices() -> None:
    two = device.parse_devices(
        "0, NVIDIA H200, 9.0, 580.159.04, GPU-aaaa1111, 00000000:00:06.0\n"
        "1, NVIDIA H200, 9.0, 580.159.04, GPU-bbbb2222, 00000000:00:07.0\n"
    )
    assert device.visible(two, None) == two
    assert device.visible(two, "") == []
    assert device.visible(two, "1") == [two[1]]
    assert device.visible(two, "GPU-bbbb,0") == [two[1], two[0]]
    assert device.visible(two, "0,7,1") == [two[0]]  # CUDA stops at the first entry that names no device
