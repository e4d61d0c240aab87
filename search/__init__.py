"""Schedule spaces, search strategies, measurement and the tuner loop."""
