"""Writes tests/data/taso_rules_sample.pb: a few substitutions in TASO's own protobuf format.

They are written in TASO's vocabulary (OpType and PMParameter numbers, inputs numbered by
TASO's generator pool) and serialized by taso's encoder, so the file is what TASO's
generator would write for them. Rule 8 is TASO's #99 pattern (two convolutions side by
side merged into one grouped convolution), true only when the two kernels have equal
output widths (rule 12 is a variant); rule 9 uses an operator taso has no counterpart for.

    python tests/data/taso_make_sample.py      # rewrites the .pb next to this file
"""

from __future__ import annotations

import os

from taso.verifier.taso_import import OP, PM, TasoOp, TasoRule, encode

X1, W1, W2, I1, I2, K1, K2, KH1, KH2, C1 = -1, -4, -5, -7, -8, -10, -11, -13, -14, -20
SAME, RELU = 0, 2


def ref(op: int, ts: int = 0) -> tuple[int, int]:
    """Output ``ts`` of operator ``op`` of the same side (an input when ``op`` is negative)."""
    return (op, ts)


def conv(x, w, kernel=(3, 3), acti=0) -> TasoOp:
    params = ((PM["kernel_h"], kernel[0]), (PM["kernel_w"], kernel[1]), (PM["stride_h"], 1), (PM["stride_w"], 1),
              (PM["pad"], SAME), (PM["acti"], acti))
    return TasoOp(OP["conv2d"], (x, w), params)


def matmul(x, y) -> TasoOp:
    return TasoOp(OP["matmul"], (x, y), ((PM["acti"], 0),))


def concat(axis, ndim, x, y) -> TasoOp:
    return TasoOp(OP["concat"], (x, y), ((PM["num_inputs"], 2), (PM["axis"], axis), (PM["numdim"], ndim)))


def op(name, *inputs, **params) -> TasoOp:
    return TasoOp(OP[name], inputs, tuple((PM[k], v) for k, v in params.items()))


def inp(op_id: int) -> tuple[int, int]:
    return (op_id, 0)


SAMPLE = [
    # 0: matmul is associative
    TasoRule((matmul(inp(W1), inp(W2)), matmul(inp(X1), ref(0))), (matmul(inp(X1), inp(W1)), matmul(ref(0), inp(W2))), ((1, 0, 1, 0),)),
    # 1: two matmuls sharing their input are one matmul over concatenated weights, split
    TasoRule((matmul(inp(X1), inp(W1)), matmul(inp(X1), inp(W2))),
             (concat(1, 2, inp(W1), inp(W2)), matmul(inp(X1), ref(0)), op("split", ref(1), num_outputs=2, axis=1)),
             ((0, 0, 2, 0), (1, 0, 2, 1))),
    # 2: a 1x3 convolution is a 3x3 one with the kernel enlarged
    TasoRule((conv(inp(I1), inp(KH1), (1, 3)),), (op("enlarge", inp(KH1), kernel_h=3, kernel_w=3), conv(inp(I1), ref(0))), ((0, 0, 1, 0),)),
    # 3: average pooling is a depthwise convolution with the pool kernel
    TasoRule((op("pool2d_avg", inp(I1), op_type=OP["pool2d_avg"], kernel_h=3, kernel_w=3, stride_h=1, stride_w=1, pad=SAME, acti=0),),
             (op("constant_pool", kernel_h=3, kernel_w=3), conv(inp(I1), ref(0))), ((0, 0, 1, 0),)),
    # 4: relu after a convolution is the fused activation
    TasoRule((conv(inp(I1), inp(K1)), op("relu", ref(0))), (conv(inp(I1), inp(K1), acti=RELU),), ((1, 0, 0, 0),)),
    # 5: the transpose of a product is the product of the transposes, swapped
    TasoRule((matmul(inp(W1), inp(W2)), op("transpose", ref(0), numdim=2, perm=2, outshuffle=1)),
             (op("transpose", inp(W2), numdim=2, perm=2, outshuffle=0), op("transpose", inp(W1), numdim=2, perm=2, outshuffle=0),
              matmul(ref(0), ref(1))),
             ((1, 0, 2, 0),)),
    # 6: scaling commutes with matmul
    TasoRule((matmul(inp(X1), inp(W1)), op("mul", ref(0), inp(C1))), (op("mul", inp(W1), inp(C1)), matmul(inp(X1), ref(0))), ((1, 0, 1, 0),)),
    # 7: the identity matrix is neutral
    TasoRule((op("constant_imm"), matmul(inp(W1), ref(0)), matmul(inp(X1), ref(1))), (matmul(inp(X1), inp(W1)),), ((2, 0, 0, 0),)),
    # 8: TASO's #99 pattern: concatenated convolution outputs as one grouped convolution (needs equal output widths)
    TasoRule((conv(inp(I1), inp(K1)), conv(inp(I2), inp(K2)), concat(1, 4, ref(0), ref(1))),
             (concat(1, 4, inp(I1), inp(I2)), concat(0, 4, inp(K1), inp(K2)), conv(ref(0), ref(1))), ((2, 0, 2, 0),)),
    # 9: TASO's merge_gconv has no taso counterpart: reported and skipped
    TasoRule((conv(inp(I1), inp(K1)),), (op("merge_gconv", inp(K1), merge_gconv_count=1), conv(inp(I1), ref(0))), ((0, 0, 1, 0),)),
    # 10: a convolution by concatenated kernels is the concatenation of the convolutions
    TasoRule((conv(inp(I1), inp(K1)), conv(inp(I1), inp(K2)), concat(1, 4, ref(0), ref(1))),
             (concat(0, 4, inp(K1), inp(K2)), conv(inp(I1), ref(0))), ((2, 0, 1, 0),)),
    # 11: the identity kernel is neutral, and the fused relu is relu
    TasoRule((op("relu", inp(I1)),), (op("constant_iconv", kernel_h=3, kernel_w=3), conv(inp(I1), ref(0), acti=RELU)), ((0, 0, 1, 0),)),
    # 12: rule 8 with 1x3 kernels and fused relus (TASO's #100/#130/#131 are such variants)
    TasoRule((conv(inp(I1), inp(KH1), (1, 3), RELU), conv(inp(I2), inp(KH2), (1, 3), RELU), concat(1, 4, ref(0), ref(1))),
             (concat(1, 4, inp(I1), inp(I2)), concat(0, 4, inp(KH1), inp(KH2)), conv(ref(0), ref(1), (1, 3), RELU)), ((2, 0, 2, 0),)),
]

PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "taso_rules_sample.pb")


def main() -> None:
    with open(PATH, "wb") as f:
        f.write(encode(SAMPLE))
    print(f"wrote {len(SAMPLE)} TASO rules to {PATH}")


if __name__ == "__main__":
    main()
