/**
 * Jest resolver: a CommonJS `require()` of an ESM-only Nest package goes to its bridge file
 * (see bridged.cjs); everything else resolves as usual.
 */
const { join } = require('node:path');
const { BRIDGED } = require('./bridged.cjs');

module.exports = (request, options) => {
  const bridge = BRIDGED[request];
  if (bridge && options.conditions?.includes('require')) return join(__dirname, bridge);
  return options.defaultResolver(request, options);
};
