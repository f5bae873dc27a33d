package haproxystat

import "testing"

func TestShowStatKeepsTheBackendsServers(t *testing.T) {
	const out = "# pxname,svname,status,stot,chkdown,\n" +
		"llm,FRONTEND,OPEN,10,,\n" +
		"vigil_pool,node1,UP,4,0,\n" +
		"vigil_pool,node2,DRAIN,6,1,\n" +
		"vigil_pool,BACKEND,UP,10,0,\n" +
		"other,node1,DOWN,0,3,\n"
	st, err := Parse(out, "vigil_pool")
	if err != nil {
		t.Fatal(err)
	}
	if len(st) != 2 || st["node1"]["status"] != "UP" || st["node2"]["status"] != "DRAIN" || st["node2"]["chkdown"] != "1" {
		t.Errorf("parsed %v", st)
	}
	if _, err := Parse("", "vigil_pool"); err == nil {
		t.Error("empty answer parsed without error")
	}
}
