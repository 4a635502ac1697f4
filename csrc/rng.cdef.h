/*
 * rng.cdef.h: what csrc/rng.c adds to the StdRng declarations of aisim_cdef.h (read by cffi as
 * its cdef: no preprocessor lines).
 */

/* Makes dst the same generator as src, at the same point of its stream (a look-ahead that
 * must not move src: the C vLLM rank's MTP decode-only runs draw their bursts ahead). */
int aisim_rng_copy(aisim_rng *dst, const aisim_rng *src);
