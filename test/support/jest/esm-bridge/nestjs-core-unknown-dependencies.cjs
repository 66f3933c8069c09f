/** `require('@nestjs/core/errors/exceptions/unknown-dependencies.exception')` under Jest: see bridged.cjs. */
module.exports = require('./bridged.cjs').bridged('@nestjs/core/errors/exceptions/unknown-dependencies.exception');
