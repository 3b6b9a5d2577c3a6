/* fiber_san.h — a switch of stacks told to the sanitizers: ASan and TSan cannot see swapcontext, so
 * each switch says where it goes (san_leave, before the switch) and that it arrived (san_arrived,
 * after); without a sanitizer both are empty. Used by the comm engine's fibers (comm_engine.c) and
 * DualPipeV's overlapped forward-backward (loop_fb.c). */
#ifndef ZL_FIBER_SAN_H
#define ZL_FIBER_SAN_H
#include <stddef.h> // size_t
#ifdef __SANITIZE_ADDRESS__
#include <sanitizer/common_interface_defs.h> // __sanitizer_start_switch_fiber, ..._finish_...
#endif
#ifdef __SANITIZE_THREAD__
#include <sanitizer/tsan_interface.h> // __tsan_switch_to_fiber
#endif

/* Before the switch: the stack it goes to (bottom, size) and TSan's fiber of it. fake_save: where the
 * leaving context's fake stack is kept (NULL: the leaving stack ends for good). */
static inline void san_leave(void **fake_save, const void *to_bottom, size_t to_size, void *to_tsan) {
  (void)fake_save, (void)to_bottom, (void)to_size, (void)to_tsan;
#ifdef __SANITIZE_ADDRESS__
  __sanitizer_start_switch_fiber(fake_save, to_bottom, to_size);
#endif
#ifdef __SANITIZE_THREAD__
  __tsan_switch_to_fiber(to_tsan, 0);
#endif
}
/* After it: the fake stack saved when this context left, and where the stack it came from lies. */
static inline void san_arrived(void *fake, const void **from_bottom, size_t *from_size) {
  (void)fake, (void)from_bottom, (void)from_size;
#ifdef __SANITIZE_ADDRESS__
  __sanitizer_finish_switch_fiber(fake, from_bottom, from_size);
#endif
}
#endif
