/* sdpa_cpu's paged kernel for a bfloat16 layer: _paged_decode.c with kv_t = bfloat16 (cache, q and out;
 * keys, values and q widened to float32 as they are read, each output rounded once as it is stored). */
#define KV_BF16
#include "_paged_decode.c"
