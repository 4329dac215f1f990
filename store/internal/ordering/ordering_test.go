package ordering

import (
	"fmt"
	"testing"
)

func TestCountAndAssign(t *testing.T) {
	keys := []string{"b", "a", "b", "c", "b"}
	distinct, counts := Count(keys)
	if fmt.Sprint(distinct, counts) != "[a b c] map[a:1 b:3 c:1]" {
		t.Fatalf("Count = %v %v", distinct, counts)
	}
	got, err := Assign(keys, counts, map[string]int64{"a": 1, "b": 7, "c": 2})
	if err != nil || fmt.Sprint(got) != "[5 1 6 2 7]" {
		t.Fatalf("Assign = %v, %v; want [5 1 6 2 7]", got, err)
	}
	if _, err := Assign(keys, counts, map[string]int64{"a": 1}); err == nil {
		t.Fatal("Assign without every key's last position succeeded")
	}
}
