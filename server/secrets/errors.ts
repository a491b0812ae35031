// The one error every part of the server secrets throws: a bad environment value, an unusable stored
// value, or a ciphertext that does not decrypt. Its message names the secret, never its value.
export class SecretsError extends Error {
  override name = 'SecretsError';
}
