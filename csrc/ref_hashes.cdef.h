/*
 * ref_hashes.cdef.h: the reference's block sequence hashes (XXH3-64, seed 1337), the C twin
 * of aisimulate_core/kv/ref_hashes.py. Read by cffi as its cdef (no preprocessor lines).
 */
/* XXH3-64 of the n bytes at d with seed */
uint64_t aisim_xxh3_64(const uint8_t *d, size_t n, uint64_t seed);
/* the first n_blocks sequence hashes of a prompt given as runs (values[i] repeated lengths[i]
 * times) into out; AISIM_EINVAL when the prompt has fewer whole blocks or block_size is 0 */
int aisim_ref_seq_hashes(const uint32_t *values, const uint32_t *lengths, size_t n_runs,
                         uint32_t block_size, uint64_t *out, size_t n_blocks);
