s_nop 0
s_nop 7
s_endpgm
s_code_end
s_branch -5
s_branch 6
s_cbranch_scc0 0
s_cbranch_scc1 1
s_cbranch_vccz 2
s_cbranch_vccnz -100
s_cbranch_execz 0x7fff
s_cbranch_execnz -32768
s_clause 0x3
s_clause 0x1f
s_sleep 2
s_sleep 0x7fff
s_sleep 65
s_wait_alu 0xff9f
s_setprio 0xffff
s_setprio 3
s_sendmsg sendmsg(MSG_DEALLOC_VGPRS)
s_sendmsg sendmsg(MSG_INTERRUPT)
s_trap 2
s_barrier_wait -1
s_barrier_wait 0
s_wait_loadcnt 0x0
s_wait_loadcnt 0x3f
s_wait_storecnt 0x1
s_wait_dscnt 0x0
s_wait_dscnt 0x2
s_wait_kmcnt 0x0
s_wait_kmcnt 0x1f
s_wait_expcnt 0x0
s_wait_samplecnt 0x0
s_wait_bvhcnt 0x0
s_wait_loadcnt_dscnt 0x0
s_wait_loadcnt_dscnt 0x102
s_wait_storecnt_dscnt 0x0
s_wait_idle
s_wait_alu 0xfffe
s_wait_alu depctr_va_vcc(0)
s_wait_alu depctr_sa_sdst(0)
s_wait_alu depctr_va_sdst(0)
s_wait_alu depctr_va_vdst(0)
s_wait_alu depctr_va_sdst(0) depctr_va_vcc(0)
s_wait_alu depctr_va_vdst(0) depctr_vm_vsrc(0)
s_wait_alu depctr_va_ssrc(0)
s_wait_alu depctr_hold_cnt(0)
s_wait_alu 0x0
s_delay_alu instid0(VALU_DEP_1)
s_delay_alu instid0(VALU_DEP_4)
s_delay_alu instid0(TRANS32_DEP_1)
s_delay_alu instid0(SALU_CYCLE_1)
s_delay_alu instid0(SALU_CYCLE_3)
s_delay_alu instid0(VALU_DEP_1) | instskip(NEXT) | instid1(VALU_DEP_2)
s_delay_alu instid0(VALU_DEP_2) | instskip(SKIP_1) | instid1(VALU_DEP_1)
s_delay_alu instid0(VALU_DEP_1) | instskip(SKIP_4) | instid1(TRANS32_DEP_1)
s_delay_alu instid0(TRANS32_DEP_3) | instid1(SALU_CYCLE_1)
s_waitcnt vmcnt(0) lgkmcnt(0)
s_waitcnt vmcnt(0)
s_waitcnt lgkmcnt(0)
s_waitcnt expcnt(1)
s_waitcnt vmcnt(3) expcnt(2) lgkmcnt(1)
s_waitcnt 0
s_icache_inv
s_denorm_mode 0xf
s_round_mode 0x0
s_endpgm
s_code_end
s_code_end
s_code_end
