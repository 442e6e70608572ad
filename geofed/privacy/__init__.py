"""Site-level differential privacy shared by the PS and the clients: settings, accountant, the Gaussian noise."""
