// Server secrets, the public face of server/secrets/: the access-token HMAC key, the cookie keys, the
// secret-encryption key, the job-signing Ed25519 key and the gateway's SSH client key. One module per
// concern:
//   secrets/load.ts             the loader: environment, or generated once into the database; SECRETS_FROM_ENV
//   secrets/catalog.ts          the five secrets by name: variables, ServerSecrets fields, parse/generate
//   secrets/symmetric.ts        access-token key, cookie keys, secret-encryption key
//   secrets/job-signing-key.ts  the Ed25519 job-signing key and its public JWK
//   secrets/ssh-keys.ts         the gateway's SSH key, through the shared OpenSSH codec (common/openssh.ts)
//   secrets/at-rest.ts          AES-256-GCM encryption of secrets kept in the database
//   secrets/spec.ts, errors.ts  what a secret's parser provides, shared helpers, SecretsError
export { decryptSecret, encryptSecret } from './secrets/at-rest.ts';
export { generateSecret, parseSecret, SECRET_ENV, SECRET_NAMES, type SecretName, type ServerSecrets } from './secrets/catalog.ts';
export { SecretsError } from './secrets/errors.ts';
export type { JobSigningKey } from './secrets/job-signing-key.ts';
export { ENV_MARK, loadSecrets, requireSecretsFromEnv, startupWarning, type SecretSource } from './secrets/load.ts';
export type { GatewaySshKey } from './secrets/ssh-keys.ts';
