"""The element types a task may declare: one table for the whole package (the catalogue, the wire format,
the children, the Triton stand-ins, FlashInfer-Trace)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Dtype:
    name: str  # as task files write it: "bf16"
    itemsize: int
    long_name: str  # torch's attribute and FlashInfer-Trace's name: "bfloat16"
    stored: str  # numpy's dtype for the raw bytes (bf16 travels as its 16 bits)
    floating: bool

    def __str__(self) -> str:
        return self.name


DTYPES: dict[str, Dtype] = {
    d.name: d
    for d in (
        Dtype("bf16", 2, "bfloat16", "uint16", True),
        Dtype("fp16", 2, "float16", "float16", True),
        Dtype("fp32", 4, "float32", "float32", True),
        Dtype("i32", 4, "int32", "int32", False),
        Dtype("i64", 8, "int64", "int64", False),
        Dtype("u8", 1, "uint8", "uint8", False),
    )
}
