// The HTTP hardening settings (client address, WebSocket limits, metrics and idempotency) as loadConfig reads them from the environment.
import { join, resolve } from 'node:path';
import { describe, expect, it } from 'vitest';
import { ConfigError, loadConfig } from '../../server/config.ts';

describe('TRUST_PROXY, METRICS_TOKEN, WebSocket limits', () => {
  it('TRUST_PROXY is a count of proxies; unset is 0 and `1` keeps meaning one proxy', () => {
    expect(loadConfig({}).trustProxy).toBe(0);
    expect(loadConfig({ TRUST_PROXY: '1' }).trustProxy).toBe(1);
    expect(loadConfig({ TRUST_PROXY: '2' }).trustProxy).toBe(2);
    expect(loadConfig({ TRUST_PROXY: 'true' }).trustProxy).toBe(1);
    expect(() => loadConfig({ TRUST_PROXY: 'yes' })).toThrow(ConfigError);
    expect(() => loadConfig({ TRUST_PROXY: '-1' })).toThrow(ConfigError);
  });

  it('METRICS_TOKEN is off when unset and refused when too short to be a secret', () => {
    expect(loadConfig({}).metricsToken).toBeNull();
    expect(loadConfig({ METRICS_TOKEN: 'a-long-enough-token-1234' }).metricsToken).toBe('a-long-enough-token-1234');
    expect(() => loadConfig({ METRICS_TOKEN: 'short' })).toThrow(/METRICS_TOKEN/);
  });

  it('WebSocket limits have sane defaults and bounds', () => {
    const c = loadConfig({});
    expect(c.wsConnectionsPerAddress).toBe(32);
    expect(c.wsAuthRecheckMs).toBe(5000);
    expect(() => loadConfig({ WS_AUTH_RECHECK_MS: '10' })).toThrow(ConfigError);
  });
});

describe('PANEL_DIR', () => {
  it('defaults to panel/dist of the repository, wherever the process started; a relative value is from the working directory', () => {
    expect(loadConfig({}).panelDir).toBe(join(resolve(import.meta.dirname, '../..'), 'panel/dist'));
    expect(loadConfig({ PANEL_DIR: '/srv/panel' }).panelDir).toBe('/srv/panel');
    expect(loadConfig({ PANEL_DIR: 'build/panel' }).panelDir).toBe(resolve(process.cwd(), 'build/panel'));
  });
});
