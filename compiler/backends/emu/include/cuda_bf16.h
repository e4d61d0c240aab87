/* Emulation stand-in for CUDA's cuda_bf16.h: __half and __nv_bfloat16 live in wm_emu_fp16.h, which the
 * force-included wm_emu.h already provides. */
#include "wm_emu.h"
