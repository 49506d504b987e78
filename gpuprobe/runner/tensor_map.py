"""TMA tensor maps: what ``cuTensorMapEncodeTiled`` is told about a tensor (:class:`TileMap`), and the
128 bytes it encodes, which a kernel takes by value."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpuprobe.runner.driver import driver_call

TENSOR_MAP_DTYPE = np.dtype([("opaque", "<u8", (16,))])  # CUtensorMap: 128 opaque bytes, passed by value


@dataclass(frozen=True)
class TileMap:
    """What ``cuTensorMapEncodeTiled`` is told about a 2-D tensor of 16-bit elements: ``rows`` x ``cols``,
    row-major and densely packed, and the box (``box_rows`` x ``box_cols``) one TMA copy moves; the
    shared-memory swizzle span (0, 32, 64 or 128 bytes) and the L2 promotion (0, 64, 128 or 256 bytes:
    the granularity at which the L2 fetches the box's lines from DRAM). Whether a combination is legal,
    and what it puts where, is the families' business (gpuprobe.families.tma.tiles)."""

    rows: int
    cols: int
    box_rows: int
    box_cols: int
    swizzle_bytes: int = 0
    l2_promotion_bytes: int = 0


def encode_tensor_map(address: int, tiles: TileMap) -> np.void:
    """``cuTensorMapEncodeTiled`` of the 16-bit tensor at device ``address`` (bf16 elements, no interleave,
    out-of-bounds elements zero), as the 128 bytes a kernel parameter holds (:data:`TENSOR_MAP_DTYPE`)."""
    from cuda.bindings import driver

    swizzle = driver.CUtensorMapSwizzle
    promotion = driver.CUtensorMapL2promotion
    swizzles = {0: swizzle.CU_TENSOR_MAP_SWIZZLE_NONE, 32: swizzle.CU_TENSOR_MAP_SWIZZLE_32B,
                64: swizzle.CU_TENSOR_MAP_SWIZZLE_64B, 128: swizzle.CU_TENSOR_MAP_SWIZZLE_128B}  # fmt: skip
    promotions = {0: promotion.CU_TENSOR_MAP_L2_PROMOTION_NONE, 64: promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_64B,
                  128: promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
                  256: promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_256B}  # fmt: skip
    driver_call(driver.cuInit, 0)
    encoded = driver_call(
        driver.cuTensorMapEncodeTiled,
        driver.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
        2,
        address,
        [driver.cuuint64_t(tiles.cols), driver.cuuint64_t(tiles.rows)],  # innermost dimension first
        [driver.cuuint64_t(2 * tiles.cols)],  # the row stride in bytes (the innermost stride is the element)
        [driver.cuuint32_t(tiles.box_cols), driver.cuuint32_t(tiles.box_rows)],
        [driver.cuuint32_t(1), driver.cuuint32_t(1)],
        driver.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE,
        swizzles[tiles.swizzle_bytes],
        promotions[tiles.l2_promotion_bytes],
        driver.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
    )
    value = np.zeros((), dtype=TENSOR_MAP_DTYPE)
    value["opaque"] = [int(word) for word in encoded.opaque]
    return value[()]
