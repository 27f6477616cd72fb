/*
 * paste.cuh - the token-pasting and stringizing helpers of every kernel
 * body: the names an instance makes from its row (SDPA_KERNEL_NAME) are
 * pasted with these, one set for all families.
 */
#ifndef SDPA_CUDA_PASTE_CUH
#define SDPA_CUDA_PASTE_CUH

#define SDPA_PASTE_(a, b) a##b
#define SDPA_PASTE(a, b) SDPA_PASTE_(a, b)
#define SDPA_PASTE3_(a, b, c) a##b##c
#define SDPA_PASTE3(a, b, c) SDPA_PASTE3_(a, b, c)
#define SDPA_STR_(a) #a
#define SDPA_STR(a) SDPA_STR_(a)

#endif /* SDPA_CUDA_PASTE_CUH */
