/* short_conv_cpu's kernel over bfloat16 inputs, states and output: _gated_conv.c with elem_t = bfloat16
 * (widened to float32 as read, narrowed as written; the weight and the sums float32). */
#define CONV_BF16
#include "_gated_conv.c"
