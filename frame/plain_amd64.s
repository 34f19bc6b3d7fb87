//go:build amd64 && !purego

#include "textflag.h"

// func plainRunAVX2(p *byte, n int) int
TEXT ·plainRunAVX2(SB), NOSPLIT, $0-24
	MOVQ p+0(FP), SI
	MOVQ n+8(FP), CX
	XORQ AX, AX
	MOVL $0x22, DX // '"'
	MOVQ DX, X1
	VPBROADCASTB X1, Y1
	MOVL $0x5c, DX // '\\'
	MOVQ DX, X2
	VPBROADCASTB X2, Y2
	MOVL $0x1f, DX // the highest control character
	MOVQ DX, X3
	VPBROADCASTB X3, Y3

loop:
	VMOVDQU (SI)(AX*1), Y0
	VPCMPEQB Y0, Y1, Y4
	VPCMPEQB Y0, Y2, Y5
	VPMINUB Y0, Y3, Y6
	VPCMPEQB Y0, Y6, Y6 // min(x, 0x1f) == x: x is a control character
	VPOR Y4, Y5, Y4
	VPOR Y4, Y6, Y4
	VPMOVMSKB Y4, DX
	TESTL DX, DX
	JNZ found
	ADDQ $32, AX
	CMPQ AX, CX
	JB loop
	VZEROUPPER
	MOVQ AX, ret+16(FP)
	RET

found:
	BSFL DX, DX
	ADDQ DX, AX
	VZEROUPPER
	MOVQ AX, ret+16(FP)
	RET
