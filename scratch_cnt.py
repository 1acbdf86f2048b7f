import torch, time
from sage_co import launch
from sage_co.sparse import predict_block_mask
from tests.test_predict import blocky
for S in (1024, 2048, 4096):
    q = blocky(1, S, 1, 128, torch.bfloat16, seed=1); k = blocky(1, S, 1, 128, torch.bfloat16, seed=2)
    t=time.time()
    with launch.recording() as rec:
        predict_block_mask(q, k, simthreshd=-1.0, backend="emu")
    print(S, time.time()-t)
    for r in rec: print("  ", r.symbol, dict(r.result))
