"""Generated from proto/robinhood/v1/rbc.proto by scripts/genproto.sh (make proto); do not edit."""
