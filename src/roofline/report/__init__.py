"""Charts and reports drawn from what bench and tune wrote."""
