package enginesim
import ("testing";"fmt";"time";"os";"strconv")
func TestTmpCap(t *testing.T){
 ctc, _ := strconv.Atoi(os.Getenv("CTC"))
 pf, _ := strconv.Atoi(os.Getenv("PF"))
 m, _ := CostModelByName("kv-preempt")
 cfg := DefaultConfig(); m.Apply(&cfg)
 cfg.ContextTokenCost = time.Duration(ctc)
 if pf > 0 { cfg.PrefillTokenCost = time.Duration(pf) }
 fmt.Println(m.Name, MeasureCapacity(cfg, m.Workload), MeasureTTFT(cfg, m.Workload))
 for _, n := range []int{8,16,32,48,64,96,128,256} {
   c := cfg; c.MaxNumSeqs = n
   s := newSched(c, newMetrics(c))
   fmt.Printf("  seats %d: %.3f/s  step with %d decoding + 8192 prefill: %v\n", n, MeasureCapacity(c, m.Workload), n, s.cost(batch{entries: make([]batchEntry, n+1), prefillTokens: 8192, contextTokens: n*12160}))
 }
}
