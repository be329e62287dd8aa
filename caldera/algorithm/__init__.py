"""Algorithm 1 (CALDERA) and its parts, pure functions on matrices: the decomposition ``W ≈ Q + L R``
(:mod:`~caldera.algorithm.decomposition`) and its frozen config (:mod:`~caldera.algorithm.config`), BlockLDLQ for Q
(:mod:`~caldera.algorithm.ldlq` on the block LDL of :mod:`~caldera.algorithm.ldl`), Algorithm 2 for L and R
(:mod:`~caldera.algorithm.lplr` on the rank-constrained regression of :mod:`~caldera.algorithm.regression`), the
randomized Hadamard transform (:mod:`~caldera.algorithm.hadamard`), the triangular products
(:mod:`~caldera.algorithm.triangular`) and the float32 product mode (:mod:`~caldera.algorithm.matmul_precision`)."""
