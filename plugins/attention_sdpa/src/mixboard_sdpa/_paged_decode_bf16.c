/* sdpa_cpu's paged kernel over a bfloat16 cache: _paged_decode.c with kv_t = bfloat16 (its keys and
 * values widened to float32 as they are read; q and out float32). */
#define KV_BF16
#include "_paged_decode.c"
