package notify

import (
	"fmt"

	"github.com/mcp-patch/mcp-patch/config"
)

// Hooks reads each configured webhook's URL and secret (from the config,
// a file or the environment) and returns the hooks. A missing file or an
// unset variable is an error naming the hook's field.
func Hooks(c config.Notify, getenv func(string) string) ([]Hook, error) {
	var out []Hook
	for i, raw := range c.Webhooks {
		w := raw.WithDefaults()
		f := fmt.Sprintf("config notify.webhooks[%d] (%s)", i, w.Name)
		u, err := ReadSecret(f+".url", w.URL, w.URLFile, w.URLEnv, getenv)
		if err != nil {
			return nil, err
		}
		if u == "" {
			return nil, fmt.Errorf("%s.url: set one of url, url_file and url_env", f)
		}
		secret, err := ReadSecret(f+".hmac_secret", "", w.HMACSecretFile, w.HMACSecretEnv, getenv)
		if err != nil {
			return nil, err
		}
		h := Hook{Name: w.Name, URL: u, Format: w.Format, Timeout: w.Timeout.D(), Attempts: w.Attempts, Backoff: w.Backoff.D()}
		if secret != "" {
			h.Secret = []byte(secret)
		}
		for _, e := range w.Events {
			h.Kinds = append(h.Kinds, Kind(e))
		}
		out = append(out, h)
	}
	return out, nil
}
