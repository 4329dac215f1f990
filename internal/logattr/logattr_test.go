package logattr

import (
	"context"
	"slices"
	"testing"
)

func TestContext(t *testing.T) {
	ctx := With(context.Background(), StepAttempt("t-1", 2, 3)...)
	want := []any{"task", "t-1", "step", 2, "attempt", 3}
	if got := From(ctx); !slices.Equal(got, want) {
		t.Errorf("From = %v", got)
	}
	// Appending to what From returned leaves ctx alone.
	_ = append(From(ctx), "x", 1)
	if got := Append(ctx, "url", "u"); !slices.Equal(got, append([]any{"url", "u"}, want...)) {
		t.Errorf("Append = %v", got)
	}
	if From(context.Background()) != nil {
		t.Error("an empty context carries attributes")
	}
}
