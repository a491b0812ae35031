// The set-up of the issuer's focused tests (server/oidc): one gateway for the test file and one OIDC client
// registered on it, started before the file's tests and closed after them. The fields are read inside tests,
// once beforeAll has filled them.
import { afterAll, beforeAll } from 'vitest';
import { startGateway, type RunningGateway } from './gateway.ts';
import { newClient, type Client } from './oidc-login.ts';

export interface IssuerRig {
  gw: RunningGateway;
  client: Client;
}

export function issuerRig(): IssuerRig {
  const rig = {} as IssuerRig;
  beforeAll(async () => {
    rig.gw = await startGateway();
    rig.client = await newClient(rig.gw.testDb.db);
  });
  afterAll(async () => rig.gw?.close());
  return rig;
}
