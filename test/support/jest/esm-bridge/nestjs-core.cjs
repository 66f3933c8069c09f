/** `require('@nestjs/core')` under Jest: see bridged.cjs. */
module.exports = require('./bridged.cjs').bridged('@nestjs/core');
