package admin

import (
	"context"
	"encoding/json"
	"strconv"
	"time"

	"github.com/troupe-gw/troupe/storage"
	"github.com/valyala/fasthttp"
)

// settingDef is an operator setting the admin API lets edit.
type settingDef struct {
	Key         string `json:"key"`
	Default     string `json:"default"`
	Description string `json:"description"`
	Min, Max    int64  `json:"-"` // the value is a decimal integer within [Min, Max]
}

// adminSettingDefs are the settings GET /api/admin/settings lists and PUT
// may change; others are refused (docs/admin-api.md, "Settings").
var adminSettingDefs = []settingDef{
	{Key: storage.SettingUsageRecordsDays, Default: strconv.Itoa(storage.DefaultUsageRecordsDays), Min: 1, Max: 3650,
		Description: "Days usage records (the request log) are kept."},
	{Key: storage.SettingUsageHourlyDays, Default: strconv.Itoa(storage.DefaultUsageHourlyDays), Min: 1, Max: 3650,
		Description: "Days hourly usage rollups (the usage charts) are kept."},
	{Key: storage.SettingUsageDailyDays, Default: strconv.Itoa(storage.DefaultUsageDailyDays), Min: 1, Max: 36500,
		Description: "Days daily spend rollups per user and model (the spend pages) are kept."},
	{Key: storage.SettingAccountTombstonesDays, Default: strconv.Itoa(storage.DefaultAccountTombstonesDays), Min: 1, Max: 3650,
		Description: "Days the account change feed keeps a deleted account's tombstone; an instance whose feed reads fail for longer reads every account again."},
}

type settingJSON struct {
	settingDef
	Value string `json:"value"` // the stored value, or Default when unset
	Set   bool   `json:"set"`   // stored (not the default)
}

// adminSettings serves GET and PUT /api/admin/settings; PUT takes
// {"settings": {"key": "value", …}} and changes all or none.
func (s *Server) adminSettings(ctx *fasthttp.RequestCtx, method string, parts []string) {
	if len(parts) != 0 {
		writeError(ctx, errNotFound(string(ctx.Path())))
		return
	}
	rctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	switch method {
	case "GET":
	case "PUT", "PATCH":
		var body struct {
			Settings map[string]string `json:"settings"`
		}
		if err := json.Unmarshal(ctx.PostBody(), &body); err != nil || len(body.Settings) == 0 {
			writeError(ctx, errBadParam("settings", `The body must be JSON {"settings": {"key": "value"}}.`))
			return
		}
		for k, v := range body.Settings {
			def, ok := findSetting(k)
			if !ok {
				writeError(ctx, errBadParam(k, "Unknown setting "+clip(k)+"."))
				return
			}
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n < def.Min || n > def.Max {
				writeError(ctx, errBadParam(k, k+" is an integer from "+strconv.FormatInt(def.Min, 10)+" to "+strconv.FormatInt(def.Max, 10)+"."))
				return
			}
		}
		for k, v := range body.Settings {
			if err := s.store.PutSetting(rctx, k, v); err != nil {
				s.storageError(ctx, err)
				return
			}
			s.log.Info("admin: setting changed", "key", k, "value", v)
		}
	default:
		writeError(ctx, errMethod(method, string(ctx.Path())))
		return
	}
	stored, err := s.store.ListSettings(rctx)
	if err != nil {
		s.storageError(ctx, err)
		return
	}
	out := make([]settingJSON, 0, len(adminSettingDefs))
	for _, d := range adminSettingDefs {
		v, ok := stored[d.Key]
		if !ok {
			v = d.Default
		}
		out = append(out, settingJSON{settingDef: d, Value: v, Set: ok})
	}
	info := map[string]any{}
	if p := s.adm.info.Load(); p != nil {
		info = *p
	}
	writeJSON(ctx, 200, map[string]any{"settings": out, "instance": info})
}

func findSetting(key string) (settingDef, bool) {
	for _, d := range adminSettingDefs {
		if d.Key == key {
			return d, true
		}
	}
	return settingDef{}, false
}
