// What the panel needs to know about its gateway, from the gateway itself (GET /config.json, never
// cached): its canonical address, the issuer (ISSUER_URL may differ from the panel's origin), the panel's client id and scope,
// and the sign-out endpoint.
export interface PanelConfig {
  /** PUBLIC_URL: the panel's canonical address, where its sign-in callback is registered. */
  publicUrl: string;
  issuer: string;
  clientId: string;
  scope: string;
  signOutUrl: string;
}

export async function loadConfig(): Promise<PanelConfig> {
  const r = await fetch('/config.json', { cache: 'no-store', headers: { accept: 'application/json' } });
  if (!r.ok) throw new Error(`GET /config.json answered ${r.status}`);
  const c = (await r.json()) as Partial<PanelConfig>;
  if (typeof c.publicUrl !== 'string' || typeof c.issuer !== 'string' || typeof c.clientId !== 'string' || typeof c.scope !== 'string' || typeof c.signOutUrl !== 'string') {
    throw new Error('GET /config.json is missing publicUrl, issuer, clientId, scope or signOutUrl');
  }
  return c as PanelConfig;
}
