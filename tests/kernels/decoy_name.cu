// A kernel whose name holds opcode-like words (HGMMA, UTMALDG) but whose code has neither.
__global__ void HGMMA_64x256x16_F32_BF16_UTMALDG_decoy(float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = 2.f * i;
}
