/* Edge coverage for libFuzzer from gcc-compiled code (gcc has no -fsanitize=fuzzer).
 *
 * gcc's -fsanitize-coverage=trace-pc calls __sanitizer_cov_trace_pc() at the start of
 * every basic block.  This file (compiled WITHOUT that flag, linked into the same shared
 * object as the instrumented code) turns those calls into AFL-style edge counters:
 * hash(previous block, this block) indexes a byte array, which tests/fuzz/run.py hands
 * to libFuzzer as an inline 8-bit counter region.  The symbol is hidden, so the calls
 * bind here at link time and never to libFuzzer's or a sanitizer runtime's own.
 */
#include <stdint.h>

#define CKPT_COV_BITS 16
#define CKPT_COV_SIZE (1u << CKPT_COV_BITS)

uint8_t ckpt_cov_counters[CKPT_COV_SIZE];
const uint32_t ckpt_cov_size = CKPT_COV_SIZE;
static __thread uintptr_t ckpt_cov_prev;

__attribute__((visibility("hidden"))) void __sanitizer_cov_trace_pc(void)
{
    uintptr_t pc = (uintptr_t)__builtin_return_address(0);
    uintptr_t cur = (pc ^ (pc >> CKPT_COV_BITS)) * 0x9E3779B1u;
    cur = (cur >> 7) & (CKPT_COV_SIZE - 1);
    ckpt_cov_counters[cur ^ ckpt_cov_prev]++;
    ckpt_cov_prev = cur >> 1;
}
