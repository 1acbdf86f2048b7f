import torch, sage_co.reference as R, time
from sage_co.ops.prepare import run_prepare
from sage_co.ops.attention import run_attention_fwd
torch.manual_seed(0)
for dt in (torch.bfloat16, torch.float16):
  for D in (64, 128, 96):
    B,S,H=1,130,2
    q=torch.randn(B,S,H,D).to(dt); k=torch.randn(B,S,H,D).to(dt); v=(torch.randn(B,S,H,D)+torch.randn(1,1,H,D)*3).to(dt)
    for kw in ({}, dict(smooth_v=True), dict(pv_dtype="fp16")):
        p=run_prepare(q,k,v,**kw)
        t=time.time()
        oh,lh=run_attention_fwd(p, variant="hip", return_lse=True, is_causal=True)
        oa,la=run_attention_fwd(p, variant="asm", return_lse=True, is_causal=True)
        m,ml=R.sage_attention_model(p, return_lse=True, is_causal=True)
        d=(oa.float()-m.float())
        print(dt, D, kw, "asm==hip", torch.equal(oa.view(torch.int16),oh.view(torch.int16)), torch.equal(la,lh), "relL2 %.2e"%(d.norm()/m.float().norm()).item(), "%.1fs"%(time.time()-t))
