package flow

import "testing"

func TestJSONEqual(t *testing.T) {
	for _, c := range []struct {
		a, b string
		want bool
	}{
		{`{"a":1,"b":2}`, `{"b":2,"a":1}`, true},
		{`{"a":1,"b":2}`, " {\n  \"a\" : 1 ,\t\"b\": 2 }\n", true},
		{`{"a":{"x":[1,{"y":null}]},"b":"s"}`, `{"b":"s","a":{"x":[1,{"y":null}]}}`, true},
		{`[1,2]`, `[2,1]`, false},
		{`{"a":1}`, `{"a":1,"b":null}`, false},
		{`{"a":1}`, `{"A":1}`, false},
		{`"\u0041"`, `"A"`, true},
		{`"a"`, `"b"`, false},
		{`true`, `true`, true},
		{`true`, `false`, false},
		{`null`, `{}`, false},
		{`[]`, `{}`, false},
		{`1`, `"1"`, false},
		// Numbers by decimal value, without rounding.
		{`1`, `1.0`, true},
		{`1`, `1e0`, true},
		{`100`, `1E2`, true},
		{`0.00012`, `1.2e-4`, true},
		{`-12000`, `-1.2e+4`, true},
		{`0`, `-0.0`, true},
		{`0`, `0e99`, true},
		{`1`, `-1`, false},
		{`9007199254740993`, `9007199254740992`, false}, // equal as float64
		{`0.1`, `0.10000000000000001`, false},           // equal as float64
		{`1e999999999999999999999`, `1e999999999999999999999`, true},
		{`1e999999999999999999999`, `1e999999999999999999998`, false},
		// Not JSON: only the same bytes.
		{`{`, `{`, true},
		{`{`, `{ `, false},
		{`1 2`, `1`, false},
	} {
		if got := JSONEqual([]byte(c.a), []byte(c.b)); got != c.want {
			t.Errorf("JSONEqual(%s, %s) = %v, want %v", c.a, c.b, got, c.want)
		}
		if got := JSONEqual([]byte(c.b), []byte(c.a)); got != c.want {
			t.Errorf("JSONEqual(%s, %s) = %v, want %v", c.b, c.a, got, c.want)
		}
	}
}
