package gateway

import (
	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/troupe-gw/troupe/translate"
)

// respOutput is the output a Responses stream relayed as it came has
// produced so far, for the response.failed the gateway adds when the
// stream breaks (appendStreamError): the API's failed response lists the
// output items produced, and the client has had them. An item is kept as
// its output_item.done gave it, or, until then, as its output_item.added
// did with the text or arguments streamed since (a message's output_text,
// a function call's arguments). It costs nothing until the first item.
type respOutput struct {
	items []respItem  // by output_index
	first [4]respItem // items' first backing array: most answers have at most four items
}

type respItem struct {
	raw  []byte // the item's JSON: as added, or as done
	done bool
	acc  []byte // an item in progress: its text or arguments so far
}

// observe takes what ev (a Responses event named name, data its JSON)
// adds to the output.
func (o *respOutput) observe(name string, data []byte) {
	switch name {
	case "response.output_item.added", "response.output_item.done":
		r, item := outputMembers(data, "item")
		i := int(r.Int())
		if r.Type != gjson.Number || i < 0 || i > len(o.items) || !item.IsObject() {
			return // not the next item, nor one added: not kept
		}
		if i == len(o.items) {
			if o.items == nil {
				o.items = o.first[:0]
			}
			o.items = append(o.items, respItem{})
		}
		it := &o.items[i]
		it.raw = append(it.raw[:0], item.Raw...)
		it.done = name == "response.output_item.done"
		it.acc = it.acc[:0]
	case "response.output_text.delta", "response.function_call_arguments.delta", "response.custom_tool_call_input.delta":
		r, delta, ok := deltaMembers(data) // OpenAI's shape, without gjson
		if !ok {
			r, delta = outputMembers(data, "delta")
		}
		i := int(r.Int())
		if i < 0 || i >= len(o.items) || o.items[i].done {
			return
		}
		o.items[i].acc = append(o.items[i].acc, delta.Str...)
	}
}

// outputMembers returns the first top-level "output_index" member of the
// event data and its first member named key, as gjson.Get would find them
// (the zero Result for one it lacks), in one pass over the members that
// stops once it has both: a delta event was two walks, one for each
// (TestOutputMembersMatchPaths, FuzzOutputMembers: the same on any JSON
// text; on malformed data gjson's paths and its ForEach may skip bytes
// differently). What it returns refers to data: read it at once, copy
// what is kept.
func outputMembers(data []byte, key string) (index, value gjson.Result) {
	var seen uint8
	gjson.Parse(b2s(data)).ForEach(func(k, v gjson.Result) bool {
		switch {
		case seen&1 == 0 && k.Str == "output_index":
			index, seen = v, seen|1
		case seen&2 == 0 && k.Str == key:
			value, seen = v, seen|2
		}
		return seen != 3
	})
	return index, value
}

// appendItems appends the output's items as a JSON array's elements
// (comma-separated, no brackets); an item in progress is marked
// "incomplete" and given what was streamed of it.
func (o *respOutput) appendItems(dst []byte) []byte {
	if o == nil {
		return dst
	}
	for i := range o.items {
		it := &o.items[i]
		if i > 0 {
			dst = append(dst, ',')
		}
		if it.done {
			dst = append(dst, it.raw...)
			continue
		}
		raw, _ := sjson.SetBytes(append([]byte(nil), it.raw...), "status", "incomplete")
		switch gjson.GetBytes(raw, "type").Str {
		case "message":
			if len(it.acc) > 0 {
				part := translate.AppendString([]byte(`[{"type":"output_text","annotations":[],"text":`), b2s(it.acc))
				raw, _ = sjson.SetRawBytes(raw, "content", append(part, "}]"...))
			}
		case "function_call":
			raw, _ = sjson.SetBytes(raw, "arguments", string(it.acc))
		case "custom_tool_call":
			raw, _ = sjson.SetBytes(raw, "input", string(it.acc))
		}
		dst = append(dst, raw...)
	}
	return dst
}
